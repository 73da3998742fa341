// The TcpStoreServer's limits (docs/store.md, "Limits"), each overridable by one
// environment variable, read once when the server starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tccl::store {

struct ServerLimits {
  // TCCL_STORE_MAX_CONNECTIONS: connections served at once (beyond, clients wait in the
  // listen backlog). The descriptor limit (`ulimit -n`) may bind first.
  uint64_t maxConnections = 65536;
  // TCCL_STORE_MAX_UNAUTHENTICATED: connections still in HELLO / AUTH (with a job key).
  uint64_t maxUnauthenticated = 4096;
  // TCCL_STORE_AUTH_TIMEOUT_MS: time a connection has to authenticate.
  std::chrono::milliseconds authTimeout{30000};
  // TCCL_STORE_MAX_REQUEST_BYTES: the largest request frame, header included (the
  // protocol's own limit by default): bounds what one connection makes the server buffer.
  uint64_t maxFrameBytes;
  // TCCL_STORE_MAX_BYTES: keys and values stored, in all.
  uint64_t maxStoredBytes = uint64_t{4} << 30;

  ServerLimits();
  static ServerLimits fromEnv();
  std::string describe() const;
};

}  // namespace tccl::store
