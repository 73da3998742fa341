// The text form of a job key: pure parsing, no OpenSSL, no environment (fuzzed by
// tests/fuzz/auth_key_fuzz.cpp). auth.hpp builds keys from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tccl::auth {

// Key length limits, in bytes (the text holds twice as many hex digits).
inline constexpr size_t kMinKeyBytes = 16;
inline constexpr size_t kMaxKeyBytes = 256;

// Decodes hex digits (either case), 2 x kMinKeyBytes to 2 x kMaxKeyBytes of them, with
// surrounding spaces, tabs, CRs and LFs ignored, into *out. On failure returns false,
// leaves *out empty and says why in *error without quoting the text (it may be a
// mistyped secret).
bool decodeHexKey(std::string_view text, std::vector<uint8_t>* out, std::string* error);

}  // namespace tccl::auth
