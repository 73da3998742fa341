// Environment variables, parsed in one place. See docs/env.md for the full list.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "tccl/types.hpp"

namespace tccl::config {

// Raw lookups: nullopt when unset or empty.
std::optional<std::string> getEnv(const char* name);
// Integer variable; throws InvalidArgumentError naming the variable when it is set
// but not an integer in [lo, hi].
std::optional<int64_t> getEnvInt(const char* name, int64_t lo, int64_t hi);

// TCCL_TIMEOUT_MS (milliseconds, in [1, kMaxTimeoutMs]). 0 or less is an
// InvalidArgumentError (it would wait forever), as is anything but an integer.
std::optional<int64_t> timeoutMs();

// The longest timeout tccl takes: 2^40 ms, about 35 years.
constexpr int64_t kMaxTimeoutMs = int64_t{1} << 40;
// Every timeout tccl takes (TCCL_TIMEOUT_MS, CommOptions::timeout, a per-call timeout,
// shrink's, Python's) must be in [1, kMaxTimeoutMs] ms: 0 or less once meant "wait
// forever", and some finite deadline is always in force now. Otherwise throws an
// InvalidArgumentError that starts with `where` (e.g. "CommOptions::timeout of 0 ms").
void checkTimeout(const std::string& where, int64_t ms, int rank = -1);
// TCCL_SEGMENT_BYTES (pipeline segment, default 1 MiB: the best of 64 KiB..4 MiB at
// 64 MiB, worlds 2 and 4, in docs/PERFORMANCE.md).
size_t segmentBytes();
constexpr size_t kDefaultSegmentBytes = 1024 * 1024;
// TCCL_ALGO: "ring", "naive", "auto" or "allreduce:ring" (several comma-separated
// "collective:algo" entries allowed). Returns the all-reduce entry, if any.
std::optional<Algorithm> allreduceAlgorithm();
// TCCL_SPIN_US: microseconds to busy-poll before sleeping in poll(2).
std::optional<int64_t> spinMicros();
// TCCL_SOCKET_BUFFER: SO_SNDBUF and SO_RCVBUF in bytes for every rank-to-rank socket
// (0: the kernel's autotuning for both). Unset: the collectives' links between two ranks
// of one host get an SO_SNDBUF of kSameHostSendBuffer and autotune their receive side;
// the p2p lane's links between two ranks of one host get both buffers at
// kSameHostP2PBuffer where the kernel's caps allow it; every other link autotunes both
// (docs/env.md says why).
std::optional<int> socketBufferBytes();
constexpr int kSameHostSendBuffer = 256 * 1024;
constexpr int kSameHostP2PBuffer = 4 * 1024 * 1024;
// TCCL_NSOCKS: TCP connections per peer on the collectives' lane, 1..kMaxNsocks
// (default 1: one TcpLink per peer, as before; docs/nsocks.md). Every rank must agree.
int nsocks();
constexpr int kMaxNsocks = 16;
// TCCL_STRIPE_BYTES: stripe messages from this many payload bytes up, overriding the
// cost model's threshold (nullopt: the cost model decides). At least 4096 (the striping
// floor, transport/striped_link.hpp).
std::optional<uint64_t> stripeBytes();

// A rank's listener under abuse (docs/security.md, "Bounded under abuse").
// TCCL_LISTEN_MAX_PENDING: connections in their handshake a rank keeps at once (default
// 128); past it the oldest is closed to make room.
int listenMaxPending();
constexpr int kDefaultListenMaxPending = 128;
// TCCL_HANDSHAKE_TIMEOUT_MS: how long an accepted connection may take to finish its
// handshake before it is closed (default 30 s).
std::chrono::milliseconds handshakeTimeout();
constexpr std::chrono::milliseconds kDefaultHandshakeTimeout{30000};
// TCCL_TCP_USER_TIMEOUT_MS: TCP keepalive + TCP_USER_TIMEOUT on data sockets (a peer host
// that vanished without a FIN fails the link in about this long); 0 turns both off;
// nullopt when unset (the communicator then uses its timeout).
std::optional<std::chrono::milliseconds> tcpUserTimeout();

}  // namespace tccl::config
