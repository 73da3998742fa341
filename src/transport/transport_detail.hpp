// What transport.cpp and transport_service.cpp share.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "transport/link.hpp"

namespace tccl::transport_detail {

// A listener's WARN lines about strangers (refused, dropped, closed mid-handshake): the
// first this many, then one line, then only a count (a flood must not flood the log).
inline constexpr uint64_t kStrangerLines = 10;

inline std::string addrKey(int rank) { return "addr/" + std::to_string(rank); }

inline const char* laneName(Lane lane) { return lane == Lane::P2P ? "p2p" : "collectives"; }

}  // namespace tccl::transport_detail
