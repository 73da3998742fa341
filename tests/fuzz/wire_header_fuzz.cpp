// Fuzzes wire::decodeHeader: the 24 bytes a rank reads from a peer before every message.
//
// The input is cut into 24-byte headers (a connection reads them back to back). Each one
// must decode to a status that agrees with its bytes, a decoded length never exceeds
// kMaxPayload, and an accepted header re-encodes to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "fuzz_check.hpp"
#include "transport/wire.hpp"

namespace tccl::wire {
namespace {

void checkOne(const uint8_t* bytes) {
  // An exact-size heap copy: ASan reports any read past the 24 bytes.
  auto in = std::make_unique<uint8_t[]>(kHeaderSize);
  std::memcpy(in.get(), bytes, kHeaderSize);

  MessageHeader h;
  const DecodeStatus st = decodeHeader(in.get(), &h);
  FUZZ_CHECK(!toString(st).empty(), "every status has a name");

  const bool magicOk = (in[0] | in[1] << 8) == kHeaderMagic;
  // Data, Abort and the point-to-point kinds (Eager .. Cancel) are contiguous.
  const bool kindOk = in[2] >= static_cast<uint8_t>(MsgKind::Data) &&
                      in[2] <= static_cast<uint8_t>(MsgKind::Cancel);
  uint64_t length = 0;
  for (size_t i = 0; i < 8; ++i) length |= static_cast<uint64_t>(in[16 + i]) << (8 * i);

  switch (st) {
    case DecodeStatus::BadMagic:
      FUZZ_CHECK(!magicOk, "BadMagic only for a wrong magic");
      return;
    case DecodeStatus::BadKind:
      FUZZ_CHECK(magicOk && !kindOk, "BadKind only for a good magic and an unknown kind");
      return;
    case DecodeStatus::TooLong:
      FUZZ_CHECK(magicOk && kindOk && length > kMaxPayload, "TooLong only over kMaxPayload");
      return;
    case DecodeStatus::Ok:
      break;
  }
  FUZZ_CHECK(magicOk && kindOk, "Ok needs the magic and a known kind");
  FUZZ_CHECK(h.length <= kMaxPayload, "a decoded length never exceeds kMaxPayload");
  FUZZ_CHECK(h.length == length, "the length is the little-endian u64 at offset 16");
  FUZZ_CHECK(static_cast<uint8_t>(h.kind) == in[2], "the kind is the byte at offset 2");

  // Every bit of the header is a field: re-encoding gives back the same 24 bytes, and
  // decoding those gives back the same header.
  uint8_t again[kHeaderSize];
  encodeHeader(h, again);
  FUZZ_CHECK(std::memcmp(again, in.get(), kHeaderSize) == 0, "encode(decode(b)) == b");
  MessageHeader h2;
  FUZZ_CHECK(decodeHeader(again, &h2) == DecodeStatus::Ok && h2 == h, "decode(encode(h)) == h");
}

}  // namespace
}  // namespace tccl::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (size_t at = 0; at + tccl::wire::kHeaderSize <= size; at += tccl::wire::kHeaderSize) {
    tccl::wire::checkOne(data + at);
  }
  return 0;
}
