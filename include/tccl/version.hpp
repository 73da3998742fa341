#pragma once

#define TCCL_VERSION_MAJOR 0
#define TCCL_VERSION_MINOR 1
#define TCCL_VERSION_PATCH 0

namespace tccl {
inline constexpr const char* kVersion = "0.1.0";
}  // namespace tccl
