// An error's ErrorInfo as flat key=value fields under stable snake_case names: the
// per-rank records that `tccl faults` and the fault tests' worker publish and judge.
#pragma once

#include <map>
#include <string>

#include "tccl/error.hpp"

namespace tccl {

// Sets out["kind"], ["culprit"], ["culprit_address"], ["detected_by"], ["rank_field"],
// ["peer"], ["collective"], ["seq"], ["algorithm"], ["phase"], ["step"], ["steps"],
// ["bytes_moved"], ["bytes_expected"], ["info_elapsed_ms"], ["timeout_ms"],
// ["local_sig"] and ["remote_sig"] from info (numbers in decimal).
void putErrorFields(const ErrorInfo& info, std::map<std::string, std::string>& out);

}  // namespace tccl
