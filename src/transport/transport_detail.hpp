// What transport.cpp and transport_service.cpp share.
#pragma once

#include <chrono>
#include <string>

#include "transport/link.hpp"

namespace tccl::transport_detail {

// A would-be peer that has not finished its Hello in this long is dropped, so that a
// silent stranger cannot pin a descriptor forever.
inline constexpr std::chrono::seconds kStrangerGrace{30};

inline std::string addrKey(int rank) { return "addr/" + std::to_string(rank); }

inline const char* laneName(Lane lane) { return lane == Lane::P2P ? "p2p" : "collectives"; }

}  // namespace tccl::transport_detail
