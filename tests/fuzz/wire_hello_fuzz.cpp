// Fuzzes the handshake decoders: wire::plausibleHelloPrefix, which judges a message's
// first bytes as they arrive, wire::decodeHello, and wire::checkHello. They read what a
// listening rank gets from whoever connects, and the replies a dialling rank reads back.
//
// Every prefix of the input must be judged plausible exactly when it matches the magic so
// far. The input is then cut into kHelloSize-byte messages; each must decode to a status
// that agrees with its bytes, re-encode to exactly the bytes it came from, and checkHello
// may accept it only when every rule in wire.hpp / docs/protocol.md holds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "fuzz_check.hpp"
#include "transport/wire.hpp"

namespace tccl::wire {
namespace {

void checkAcceptance(const Hello& h, uint64_t jobId, uint64_t commId, int myRank, int worldSize) {
  const RejectReason r = checkHello(h, jobId, commId, myRank, worldSize);
  FUZZ_CHECK(!toString(r).empty(), "every reason has a name");
  if (r != RejectReason::None) return;
  FUZZ_CHECK(h.kind == HelloKind::Hello, "only a Hello is accepted");
  FUZZ_CHECK(h.version == kProtocolVersion, "only this protocol version is accepted");
  FUZZ_CHECK(h.jobId == jobId && h.commId == commId, "only this job and communicator");
  FUZZ_CHECK(h.worldSize == worldSize, "only this world size");
  FUZZ_CHECK(h.rank >= 0 && h.rank < worldSize && h.rank != myRank, "only another rank in range");
  FUZZ_CHECK(h.targetRank == myRank, "only a hello addressed to this rank");
  // The lane field (docs/protocol.md): byte 0 the lane, byte 1 the stripe, byte 2 the
  // socket count minus 1, byte 3 zero.
  const uint32_t lane = h.lane & 0xFF, stripe = (h.lane >> 8) & 0xFF;
  const uint32_t count = ((h.lane >> 16) & 0xFF) + 1;
  FUZZ_CHECK(lane <= 1, "only lane 0 (collectives) or 1 (point to point)");
  FUZZ_CHECK((h.lane >> 24) == 0, "byte 3 of the lane field is zero");
  FUZZ_CHECK(count <= 16 && stripe < count, "a stripe below a count of at most 16 sockets");
  FUZZ_CHECK(lane == 0 || count == 1, "the p2p lane is one socket");
}

// The transport calls plausibleHelloPrefix on every prefix it has received, so each prefix
// is handed over in an exact-size heap copy: ASan reports a read past its end.
void checkPrefixes(const uint8_t* data, size_t size) {
  uint8_t magic[4];
  for (size_t i = 0; i < 4; ++i) magic[i] = static_cast<uint8_t>(kHelloMagic >> (8 * i));
  bool plausibleSoFar = true;
  const size_t upTo = size < kHelloSize ? size : kHelloSize;
  for (size_t n = 0; n <= upTo; ++n) {
    auto copy = std::make_unique<uint8_t[]>(n == 0 ? 1 : n);
    if (n > 0) std::memcpy(copy.get(), data, n);
    constexpr uint16_t kUnset = 0xBEEF;
    uint16_t version = kUnset;
    const bool plausible = plausibleHelloPrefix(copy.get(), n, &version);
    if (n >= 1 && n <= 4) plausibleSoFar = plausibleSoFar && data[n - 1] == magic[n - 1];
    FUZZ_CHECK(plausible == plausibleSoFar, "plausible exactly while the magic matches");
    if (plausible && n >= kHelloPrefixSize) {
      FUZZ_CHECK(version == (data[4] | data[5] << 8), "the version is the u16 at offset 4");
    } else if (n < kHelloPrefixSize) {
      FUZZ_CHECK(version == kUnset, "no version before the prefix is in");
    }
    FUZZ_CHECK(plausibleHelloPrefix(copy.get(), n) == plausible, "the version pointer is optional");
  }
}

void checkOne(const uint8_t* bytes) {
  // An exact-size heap copy: ASan reports any read past the message.
  auto in = std::make_unique<uint8_t[]>(kHelloSize);
  std::memcpy(in.get(), bytes, kHelloSize);

  Hello h;
  const DecodeStatus st = decodeHello(in.get(), &h);
  FUZZ_CHECK(!toString(st).empty(), "every status has a name");
  const bool magicOk = fuzz::loadU32(in.get()) == kHelloMagic;
  const unsigned kind = in[6] | in[7] << 8;
  constexpr unsigned kFirstKind = static_cast<unsigned>(HelloKind::Hello);
  constexpr unsigned kLastKind = static_cast<unsigned>(HelloKind::Proof);
  switch (st) {
    case DecodeStatus::BadMagic:
      FUZZ_CHECK(!magicOk, "BadMagic only for a wrong magic");
      return;
    case DecodeStatus::BadKind:
      FUZZ_CHECK(magicOk && (kind < kFirstKind || kind > kLastKind),
                 "BadKind only for an unknown kind");
      return;
    case DecodeStatus::TooLong:
      FUZZ_CHECK(false, "a hello has no length to be too long");
      return;
    case DecodeStatus::Ok:
      break;
  }
  FUZZ_CHECK(magicOk && kind >= kFirstKind && kind <= kLastKind,
             "Ok needs the magic and a known kind");
  FUZZ_CHECK(static_cast<unsigned>(h.kind) == kind, "the kind is the u16 at offset 6");
  FUZZ_CHECK(!toString(h.reason).empty(), "any reason a peer sends has a name");

  uint8_t again[kHelloSize];
  encodeHello(h, again);
  FUZZ_CHECK(std::memcmp(again, in.get(), kHelloSize) == 0, "encode(decode(b)) == b");
  Hello h2;
  FUZZ_CHECK(decodeHello(again, &h2) == DecodeStatus::Ok && h2 == h, "decode(encode(h)) == h");

  // The acceptor's rules, against the hello's own job, communicator and world (the case
  // that reaches the deepest checks) and against a fixed small job.
  checkAcceptance(h, h.jobId, h.commId, h.targetRank, h.worldSize);
  checkAcceptance(h, 1, 2, 0, 4);
  checkAcceptance(h, h.jobId, h.commId, 1, 2);
}

}  // namespace
}  // namespace tccl::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tccl::wire::checkPrefixes(data, size);
  for (size_t at = 0; at + tccl::wire::kHelloSize <= size; at += tccl::wire::kHelloSize) {
    tccl::wire::checkOne(data + at);
  }
  return 0;
}
