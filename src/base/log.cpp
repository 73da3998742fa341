#include "base/log.hpp"

#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tccl::log {
namespace {

Level parseLevel() {
  const char* v = std::getenv("TCCL_DEBUG");
  if (v == nullptr || *v == '\0') return Level::Warn;
  if (strcasecmp(v, "NONE") == 0 || strcasecmp(v, "OFF") == 0) return Level::None;
  if (strcasecmp(v, "INFO") == 0) return Level::Info;
  if (strcasecmp(v, "TRACE") == 0) return Level::Trace;
  return Level::Warn;
}

std::atomic<int> gRank{-1};

const char* name(Level l) {
  switch (l) {
    case Level::Warn:
      return "WARN";
    case Level::Info:
      return "INFO";
    case Level::Trace:
      return "TRACE";
    default:
      return "NONE";
  }
}

}  // namespace

Level threshold() {
  static const Level level = parseLevel();
  return level;
}

void setRank(int rank) { gRank.store(rank); }

void write(Level l, const std::string& line) {
  char prefix[96];
  int rank = gRank.load();
  if (rank >= 0) {
    std::snprintf(prefix, sizeof prefix, "tccl %s [pid %d rank %d] ", name(l),
                  static_cast<int>(getpid()), rank);
  } else {
    std::snprintf(prefix, sizeof prefix, "tccl %s [pid %d] ", name(l), static_cast<int>(getpid()));
  }
  std::string out = prefix + line + "\n";
  // One write(2) per line so that lines of concurrent processes do not interleave.
  ssize_t rc = ::write(STDERR_FILENO, out.data(), out.size());
  (void)rc;
}

}  // namespace tccl::log
