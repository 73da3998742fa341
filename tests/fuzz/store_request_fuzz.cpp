// Fuzzes storeproto::decodeRequest: what a TcpStore server reads from any client that
// connects to its port. Besides the frame contract (store_fuzz.hpp) it checks that a
// request carries only its command's fields, within their limits, and it replays the
// server's ADD arithmetic: a SET's value is parsed by the next ADD as the server would.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_check.hpp"
#include "store/store_protocol.hpp"
#include "store_fuzz.hpp"

namespace tccl::storeproto {
namespace {

// The rule in store_protocol.hpp, independently: optional '-', 1..19 digits, in range.
std::optional<int64_t> referenceParse(const Bytes& v) {
  const char* first = reinterpret_cast<const char*>(v.data());
  const char* last = first + v.size();
  const size_t digits = v.size() - (!v.empty() && v[0] == '-' ? 1 : 0);
  if (digits == 0 || digits > 19) return std::nullopt;
  int64_t x = 0;
  const std::from_chars_result r = std::from_chars(first, last, x);
  if (r.ec != std::errc() || r.ptr != last) return std::nullopt;
  return x;
}

void checkValueRules(const Request& q, Bytes* lastSet) {
  if (q.command == Command::Set) {
    const std::optional<int64_t> parsed = parseDecimalInt64(q.value);
    FUZZ_CHECK(parsed == referenceParse(q.value), "parseDecimalInt64 follows its rule");
    if (parsed) {
      FUZZ_CHECK(parseDecimalInt64(formatDecimal(*parsed)) == parsed, "format/parse round trip");
    }
    *lastSet = q.value;
  }
  if (q.command == Command::Add) {
    std::string error;
    const std::optional<int64_t> fresh = applyAdd(q.key, nullptr, q.delta, &error);
    FUZZ_CHECK(fresh == q.delta, "add to an absent key starts from 0");
    const std::optional<int64_t> base = referenceParse(*lastSet);
    const std::optional<int64_t> sum = applyAdd(q.key, lastSet, q.delta, &error);
    if (!base) {
      FUZZ_CHECK(!sum && !error.empty(), "add over a non-integer value is refused with a reason");
      return;
    }
    const __int128 exact = static_cast<__int128>(*base) + q.delta;
    if (exact < INT64_MIN || exact > INT64_MAX) {
      FUZZ_CHECK(!sum && !error.empty(), "an overflowing add is refused with a reason");
    } else {
      FUZZ_CHECK(sum && *sum == static_cast<int64_t>(exact), "add is exact");
    }
  }
}

void checkFields(const Request& q, size_t frameBytes) {
  const Request none;
  const Command c = q.command;
  const bool hasKey = c == Command::Set || c == Command::Get || c == Command::Add ||
                      c == Command::Erase || c == Command::CompareSet;
  const bool hasKeys =
      c == Command::Check || c == Command::Wait || c == Command::MultiGet || c == Command::MultiSet;
  const bool hasTimeout = c == Command::Get || c == Command::Wait || c == Command::MultiGet;
  FUZZ_CHECK(hasKey || q.key == none.key, "a key only where the command has one");
  FUZZ_CHECK(c == Command::Set || c == Command::CompareSet || q.value == none.value,
             "a value only in SET and COMPARE_SET");
  FUZZ_CHECK(c == Command::CompareSet || q.expected == none.expected,
             "an expected value only in COMPARE_SET");
  FUZZ_CHECK(c == Command::MultiSet ? q.values.size() == q.keys.size() : q.values.empty(),
             "values only in MULTI_SET, one per key");
  FUZZ_CHECK(c == Command::Add || q.delta == none.delta, "a delta only in ADD");
  FUZZ_CHECK(hasTimeout || q.timeoutMs == none.timeoutMs,
             "a timeout only in GET, WAIT and MULTI_GET");
  FUZZ_CHECK(hasKeys || q.keys.empty(), "a key list only in CHECK, WAIT and MULTI_*");
  FUZZ_CHECK(c == Command::Hello || (q.hasKey == none.hasKey && q.nonce == none.nonce),
             "a key flag and a nonce only in HELLO");
  FUZZ_CHECK(c == Command::Auth || q.mac == none.mac, "a MAC only in AUTH");
  if (c == Command::Hello || c == Command::Auth) {
    // What an unauthenticated client may send is small and fixed.
    FUZZ_CHECK(frameBytes <= kHeaderBytes + kMaxAuthBodyBytes, "HELLO / AUTH are small");
  }

  FUZZ_CHECK(q.key.size() <= kMaxKeyBytes, "a key within kMaxKeyBytes");
  FUZZ_CHECK(q.value.size() <= kMaxValueBytes, "a value within kMaxValueBytes");
  FUZZ_CHECK(q.expected.size() <= kMaxValueBytes, "an expected value within kMaxValueBytes");
  const size_t listed = fuzz::checkKeyList(q.keys);
  size_t valueBytes = 0;
  for (const tccl::Bytes& v : q.values) {
    FUZZ_CHECK(v.size() <= kMaxValueBytes, "a MULTI_SET value within kMaxValueBytes");
    valueBytes += 4 + v.size();
  }
  // Nothing decoded is larger than the bytes it came from.
  FUZZ_CHECK(q.key.size() + q.value.size() + q.expected.size() + listed + valueBytes <= frameBytes,
             "no amplification");
  // A deadline from any timeout a client sends is computable (no clock overflow).
  if (hasTimeout) (void)deadlineAfterMs(q.timeoutMs);
}

}  // namespace
}  // namespace tccl::storeproto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tccl::storeproto;
  Request sentinel;
  sentinel.command = Command::Ping;
  sentinel.key = "sentinel: never a decoded PING";
  tccl::Bytes lastSet;
  tccl::fuzz::walkFrames(
      data, size, sentinel,
      [](const uint8_t* p, size_t n, Request* out) { return decodeRequest(p, n, out); },
      [](const Request& q, tccl::Bytes* out) { encodeRequest(q, out); },
      [&](const Request& q, size_t frameBytes) {
        checkFields(q, frameBytes);
        checkValueRules(q, &lastSet);
      });
  return 0;
}
