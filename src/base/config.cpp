#include "base/config.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "base/log.hpp"
#include "tccl/error.hpp"

namespace tccl::config {

std::optional<std::string> getEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> getEnvInt(const char* name, int64_t lo, int64_t hi) {
  auto v = getEnv(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || x < lo || x > hi) {
    throwError(ErrorKind::InvalidArgument, std::string(name) + "='" + *v +
                                               "' is not an integer in [" + std::to_string(lo) +
                                               ", " + std::to_string(hi) + "]");
  }
  return x;
}

void checkTimeout(const std::string& where, int64_t ms, int rank) {
  if (ms <= 0) {
    throwError(ErrorKind::InvalidArgument,
               where +
                   ": a timeout must be positive (0 or less would wait forever); use a large "
                   "value instead, e.g. 86400000 ms (a day)",
               rank);
  }
  if (ms > kMaxTimeoutMs) {
    throwError(ErrorKind::InvalidArgument,
               where + ": more than the longest timeout, " + std::to_string(kMaxTimeoutMs) +
                   " ms (about 35 years)",
               rank);
  }
}

std::optional<int64_t> timeoutMs() {
  constexpr const char* kName = "TCCL_TIMEOUT_MS";
  const auto text = getEnv(kName);
  if (!text) return std::nullopt;
  // An integer of 0 or less gets its own message; anything else the range's.
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(text->c_str(), &end, 10);
  if (*end == '\0' && errno == 0 && x <= 0)
    checkTimeout(std::string(kName) + "='" + *text + "'", x);
  return getEnvInt(kName, 1, kMaxTimeoutMs);
}

size_t segmentBytes() {
  auto v = getEnvInt("TCCL_SEGMENT_BYTES", 1, int64_t{1} << 32);
  return v ? static_cast<size_t>(*v) : kDefaultSegmentBytes;
}

std::optional<Algorithm> allreduceAlgorithm() {
  auto v = getEnv("TCCL_ALGO");
  if (!v) return std::nullopt;
  std::string_view s = *v;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    size_t colon = item.find(':');
    if (colon != std::string_view::npos) {
      if (item.substr(0, colon) != "allreduce") continue;
      item = item.substr(colon + 1);
    }
    auto a = parseAlgorithm(item);
    if (!a) {
      throwError(ErrorKind::InvalidArgument,
                 "TCCL_ALGO='" + *v + "': unknown all-reduce algorithm '" + std::string(item) +
                     "' (expected auto, ring, naive, tree, hd, rd or hier)");
    }
    return a;
  }
  return std::nullopt;
}

std::optional<int64_t> spinMicros() { return getEnvInt("TCCL_SPIN_US", 0, 10'000'000); }

std::optional<int> socketBufferBytes() {
  auto v = getEnvInt("TCCL_SOCKET_BUFFER", 0, 1 << 30);
  if (!v) return std::nullopt;
  return static_cast<int>(*v);
}

int nsocks() { return static_cast<int>(getEnvInt("TCCL_NSOCKS", 1, kMaxNsocks).value_or(1)); }

std::optional<uint64_t> stripeBytes() {
  auto v = getEnvInt("TCCL_STRIPE_BYTES", 4096, int64_t{1} << 40);
  if (!v) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

int listenMaxPending() {
  return static_cast<int>(
      getEnvInt("TCCL_LISTEN_MAX_PENDING", 1, 1 << 20).value_or(kDefaultListenMaxPending));
}

std::chrono::milliseconds handshakeTimeout() {
  auto v = getEnvInt("TCCL_HANDSHAKE_TIMEOUT_MS", 1, 3'600'000);
  return v ? std::chrono::milliseconds(*v) : kDefaultHandshakeTimeout;
}

std::optional<std::chrono::milliseconds> tcpUserTimeout() {
  auto v = getEnvInt("TCCL_TCP_USER_TIMEOUT_MS", 0, std::numeric_limits<int32_t>::max());
  if (!v) return std::nullopt;
  return std::chrono::milliseconds(*v);
}

}  // namespace tccl::config
