#include "store/store_server_limits.hpp"

#include "base/config.hpp"
#include "store/store_protocol.hpp"

namespace tccl::store {

ServerLimits::ServerLimits()
    : maxFrameBytes(storeproto::kHeaderBytes + storeproto::kMaxBodyBytes) {}

ServerLimits ServerLimits::fromEnv() {
  ServerLimits l;
  constexpr int64_t kHuge = int64_t{1} << 50;
  if (auto v = config::getEnvInt("TCCL_STORE_MAX_CONNECTIONS", 1, kHuge)) {
    l.maxConnections = static_cast<uint64_t>(*v);
  }
  if (auto v = config::getEnvInt("TCCL_STORE_MAX_UNAUTHENTICATED", 1, kHuge)) {
    l.maxUnauthenticated = static_cast<uint64_t>(*v);
  }
  if (auto v = config::getEnvInt("TCCL_STORE_AUTH_TIMEOUT_MS", 1, config::kMaxTimeoutMs)) {
    l.authTimeout = std::chrono::milliseconds(*v);
  }
  // At least a header and a small body: a limit below that would refuse HELLO itself.
  if (auto v = config::getEnvInt("TCCL_STORE_MAX_REQUEST_BYTES", 256,
                                 static_cast<int64_t>(l.maxFrameBytes))) {
    l.maxFrameBytes = static_cast<uint64_t>(*v);
  }
  if (auto v = config::getEnvInt("TCCL_STORE_MAX_BYTES", 0, kHuge)) {
    l.maxStoredBytes = static_cast<uint64_t>(*v);
  }
  return l;
}

std::string ServerLimits::describe() const {
  return std::to_string(maxConnections) + " connections, " + std::to_string(maxUnauthenticated) +
         " authenticating within " + std::to_string(authTimeout.count()) + " ms, " +
         std::to_string(maxFrameBytes) + " bytes per request, " + std::to_string(maxStoredBytes) +
         " bytes stored";
}

}  // namespace tccl::store
