// Logging, controlled by TCCL_DEBUG=NONE|WARN|INFO|TRACE (default WARN). Lines go to
// stderr as "tccl <LEVEL> [pid N rank R] message". Cheap when disabled: the stream
// expression is not evaluated.
#pragma once

#include <sstream>
#include <string>

namespace tccl::log {

enum class Level { None = 0, Warn = 1, Info = 2, Trace = 3 };

Level threshold();
inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(threshold()); }
void write(Level l, const std::string& line);
// The rank shown in log lines of this process (-1: not known yet).
void setRank(int rank);

}  // namespace tccl::log

#define TCCL_LOG(LEVEL, EXPR)                                            \
  do {                                                                   \
    if (::tccl::log::enabled(::tccl::log::Level::LEVEL)) {               \
      std::ostringstream tccl_log_os_;                                   \
      tccl_log_os_ << EXPR;                                              \
      ::tccl::log::write(::tccl::log::Level::LEVEL, tccl_log_os_.str()); \
    }                                                                    \
  } while (0)
#define TCCL_WARN(EXPR) TCCL_LOG(Warn, EXPR)
#define TCCL_INFO(EXPR) TCCL_LOG(Info, EXPR)
#define TCCL_TRACE(EXPR) TCCL_LOG(Trace, EXPR)
