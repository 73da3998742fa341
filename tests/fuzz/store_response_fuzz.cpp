// Fuzzes storeproto::decodeResponse: what a TcpStore client reads from the server it
// dialled (or from whatever answers on that port). Besides the frame contract
// (store_fuzz.hpp) it checks that a response carries only the fields its command and
// status allow, within their limits, and that a TIMEOUT's missing keys render as the
// printable text the client's error message shows.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "store/store_protocol.hpp"
#include "store_fuzz.hpp"

namespace tccl::storeproto {
namespace {

void checkFields(const Response& p, size_t frameBytes) {
  const Response none;
  const Command c = p.command;
  const bool ok = p.status == Status::Ok;
  FUZZ_CHECK(p.status == Status::Ok || p.status == Status::Timeout || p.status == Status::Invalid,
             "a known status");
  if (p.status == Status::Timeout) {
    FUZZ_CHECK(c == Command::Get || c == Command::Wait || c == Command::MultiGet,
               "TIMEOUT only answers GET, WAIT and MULTI_GET");
    FUZZ_CHECK(!p.keys.empty(), "a TIMEOUT names a missing key");
    const std::string shown = describeKeys(p.keys);
    for (char ch : shown) {
      FUZZ_CHECK(ch >= 0x20 && ch < 0x7f, "missing keys are shown as printable text");
    }
  } else {
    FUZZ_CHECK(p.keys.empty(), "a key list only in TIMEOUT");
  }
  FUZZ_CHECK(p.status == Status::Invalid || p.message.empty(), "a message only in INVALID");
  FUZZ_CHECK(p.message.size() <= kMaxMessageBytes, "a message within kMaxMessageBytes");
  FUZZ_CHECK((ok && (c == Command::Get || c == Command::CompareSet)) || p.value == none.value,
             "a value only in OK to GET and COMPARE_SET");
  FUZZ_CHECK((ok && c == Command::MultiGet) || p.values.empty(),
             "a value list only in OK to MULTI_GET");
  size_t valueBytes = 0;
  for (const tccl::Bytes& v : p.values) {
    FUZZ_CHECK(v.size() <= kMaxValueBytes, "a MULTI_GET value within kMaxValueBytes");
    valueBytes += 4 + v.size();
  }
  FUZZ_CHECK((ok && c == Command::Add) || p.number == none.number, "a number only in OK to ADD");
  FUZZ_CHECK((ok && (c == Command::Check || c == Command::Erase)) || p.flag == none.flag,
             "a flag only in OK to CHECK and ERASE");
  FUZZ_CHECK((ok && c == Command::Hello) ||
                 (p.hasKey == none.hasKey && p.nonce == none.nonce && p.mac == none.mac),
             "a key flag, nonce and MAC only in OK to HELLO");
  if (ok && (c == Command::Hello || c == Command::Auth)) {
    FUZZ_CHECK(frameBytes <= kHeaderBytes + kMaxAuthBodyBytes, "OK to HELLO / AUTH is small");
  }
  FUZZ_CHECK(p.value.size() <= kMaxValueBytes, "a value within kMaxValueBytes");
  const size_t listed = fuzz::checkKeyList(p.keys);
  FUZZ_CHECK(p.value.size() + p.message.size() + listed + valueBytes <= frameBytes,
             "no amplification");
}

}  // namespace
}  // namespace tccl::storeproto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tccl::storeproto;
  Response sentinel;
  sentinel.command = Command::Ping;
  sentinel.message = "sentinel: never a decoded OK to PING";
  tccl::fuzz::walkFrames(
      data, size, sentinel,
      [](const uint8_t* p, size_t n, Response* out) { return decodeResponse(p, n, out); },
      [](const Response& r, tccl::Bytes* out) { encodeResponse(r, out); },
      [](const Response& r, size_t frameBytes) { checkFields(r, frameBytes); });
  return 0;
}
