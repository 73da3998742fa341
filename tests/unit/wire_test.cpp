// The wire format: exact bytes against the table in wire.hpp, round trips, rejection of
// hostile or foreign bytes, the handshake's acceptance rules and the fingerprint.
#include "transport/wire.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace tccl::wire {
namespace {

using HeaderBytes = std::array<uint8_t, kHeaderSize>;
using HelloBytes = std::array<uint8_t, kHelloSize>;

HeaderBytes encode(const MessageHeader& h) {
  HeaderBytes b{};
  encodeHeader(h, b.data());
  return b;
}

HelloBytes encode(const Hello& h) {
  HelloBytes b{};
  encodeHello(h, b.data());
  return b;
}

MessageHeader sampleHeader() {
  MessageHeader h;
  h.kind = MsgKind::Data;
  h.flags = 0;
  h.seq = 0x01020304;
  h.fingerprint = 0xA1B2C3D4;
  h.step = 0x11223344;
  h.length = 0xABCDEF0123;  // under kMaxPayload (2^40)
  return h;
}

TEST(WireHeader, ExactLittleEndianBytes) {
  const HeaderBytes b = encode(sampleHeader());
  const HeaderBytes expected = {
      0x54, 0x43,                                      // magic "TC"
      0x01,                                            // kind data
      0x00,                                            // flags
      0x04, 0x03, 0x02, 0x01,                          // seq
      0xD4, 0xC3, 0xB2, 0xA1,                          // fingerprint
      0x44, 0x33, 0x22, 0x11,                          // step
      0x23, 0x01, 0xEF, 0xCD, 0xAB, 0x00, 0x00, 0x00,  // length
  };
  EXPECT_EQ(b, expected);
  EXPECT_EQ(kHeaderSize, 24u);
  EXPECT_EQ(b[0], 'T');
  EXPECT_EQ(b[1], 'C');
}

TEST(WireHeader, RoundTrips) {
  std::vector<MessageHeader> cases;
  cases.push_back(MessageHeader{});
  cases.push_back(sampleHeader());
  MessageHeader h;
  h.kind = MsgKind::Abort;
  h.flags = 0xFF;
  h.seq = UINT32_MAX;
  h.fingerprint = UINT32_MAX;
  h.step = UINT32_MAX;
  h.length = kMaxPayload;
  cases.push_back(h);
  h = MessageHeader{};
  h.length = 1;
  h.step = 7;
  cases.push_back(h);
  for (const MessageHeader& c : cases) {
    const HeaderBytes b = encode(c);
    MessageHeader out;
    out.seq = 99;  // must be overwritten
    ASSERT_EQ(decodeHeader(b.data(), &out), DecodeStatus::Ok);
    EXPECT_EQ(out, c);
  }
}

TEST(WireHeader, EveryFieldLandsAtItsOffset) {
  // Each field alone set to a distinctive value changes exactly its own bytes.
  const HeaderBytes zero = encode(MessageHeader{});
  struct Field {
    const char* name;
    size_t offset;
    size_t size;
    MessageHeader h;
  };
  std::vector<Field> fields;
  MessageHeader h;
  h.kind = MsgKind::Abort;
  fields.push_back({"kind", 2, 1, h});
  h = MessageHeader{};
  h.flags = 0x5A;
  fields.push_back({"flags", 3, 1, h});
  h = MessageHeader{};
  h.seq = 0x8899AABB;
  fields.push_back({"seq", 4, 4, h});
  h = MessageHeader{};
  h.fingerprint = 0x8899AABB;
  fields.push_back({"fingerprint", 8, 4, h});
  h = MessageHeader{};
  h.step = 0x8899AABB;
  fields.push_back({"step", 12, 4, h});
  h = MessageHeader{};
  h.length = 0x00000099AABBCCDD;
  fields.push_back({"length", 16, 8, h});
  for (const Field& f : fields) {
    const HeaderBytes b = encode(f.h);
    for (size_t i = 0; i < kHeaderSize; ++i) {
      if (i < f.offset || i >= f.offset + f.size) {
        EXPECT_EQ(b[i], zero[i]) << f.name << " changed byte " << i;
      }
    }
  }
  // The low byte comes first.
  EXPECT_EQ(encode(fields[2].h)[4], 0xBB);
  EXPECT_EQ(encode(fields[2].h)[7], 0x88);
  EXPECT_EQ(encode(fields[5].h)[16], 0xDD);
  EXPECT_EQ(encode(fields[5].h)[20], 0x99);
  EXPECT_EQ(encode(fields[5].h)[21], 0x00);
}

TEST(WireHeader, RejectsBadMagic) {
  for (size_t i : {size_t{0}, size_t{1}}) {
    HeaderBytes b = encode(sampleHeader());
    b[i] ^= 0x01;
    MessageHeader out;
    out.seq = 42;
    EXPECT_EQ(decodeHeader(b.data(), &out), DecodeStatus::BadMagic) << "byte " << i;
    EXPECT_EQ(out.seq, 42u) << "a rejected header must not be written out";
  }
  // HTTP, or the other end of a handshake, is not a header.
  HeaderBytes http{};
  std::memcpy(http.data(), "GET / HTTP/1.1\r\nHost: x\r\n", kHeaderSize);
  MessageHeader out;
  EXPECT_EQ(decodeHeader(http.data(), &out), DecodeStatus::BadMagic);
  // Magic bytes swapped ("CT").
  HeaderBytes swapped = encode(sampleHeader());
  std::swap(swapped[0], swapped[1]);
  EXPECT_EQ(decodeHeader(swapped.data(), &out), DecodeStatus::BadMagic);
}

TEST(WireHeader, RejectsUnknownKind) {
  // 1 data, 2 abort, 3..8 the point-to-point kinds.
  for (int kind : {0, 9, 10, 0x7F, 0xFF}) {
    HeaderBytes b = encode(sampleHeader());
    b[2] = static_cast<uint8_t>(kind);
    MessageHeader out;
    EXPECT_EQ(decodeHeader(b.data(), &out), DecodeStatus::BadKind) << "kind " << kind;
  }
}

TEST(WireHeader, RejectsLengthOverLimit) {
  MessageHeader h = sampleHeader();
  h.length = kMaxPayload;
  MessageHeader out;
  HeaderBytes b = encode(h);
  EXPECT_EQ(decodeHeader(b.data(), &out), DecodeStatus::Ok);
  EXPECT_EQ(out.length, kMaxPayload);
  for (uint64_t len : {kMaxPayload + 1, kMaxPayload * 2, UINT64_MAX}) {
    h.length = len;
    b = encode(h);
    MessageHeader untouched;
    untouched.seq = 5;
    EXPECT_EQ(decodeHeader(b.data(), &untouched), DecodeStatus::TooLong) << "length " << len;
    EXPECT_EQ(untouched.seq, 5u);
  }
  EXPECT_EQ(kMaxPayload, uint64_t{1} << 40);
}

TEST(WireHeader, StatusNames) {
  EXPECT_EQ(toString(DecodeStatus::Ok), "ok");
  std::set<std::string_view> names;
  for (DecodeStatus s :
       {DecodeStatus::Ok, DecodeStatus::BadMagic, DecodeStatus::BadKind, DecodeStatus::TooLong}) {
    EXPECT_NE(toString(s), "?");
    names.insert(toString(s));
  }
  EXPECT_EQ(names.size(), 4u);
}

Hello sampleHello() {
  Hello h;
  h.version = kProtocolVersion;
  h.kind = HelloKind::Hello;
  h.jobId = 0x0102030405060708;
  h.commId = 0x1112131415161718;
  h.rank = 2;
  h.worldSize = 5;
  h.targetRank = 3;
  h.reason = RejectReason::None;
  return h;
}

TEST(WireHello, ExactLittleEndianBytes) {
  Hello h = sampleHello();
  h.kind = HelloKind::Reject;
  h.reason = RejectReason::WrongTarget;
  h.rank = -2;  // negative numbers are two's complement
  h.flags = kHelloFlagAuth;
  h.lane = 1;
  for (size_t i = 0; i < kNonceSize; ++i) h.nonce[i] = static_cast<uint8_t>(0xA0 + i);
  for (size_t i = 0; i < kMacSize; ++i) h.mac[i] = static_cast<uint8_t>(0xC0 + i);
  const HelloBytes b = encode(h);
  const HelloBytes expected = {
      'T',  'C',  'C',  'L',                           // magic
      0x02, 0x00,                                      // version
      0x03, 0x00,                                      // kind reject
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // job id
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // communicator id
      0xFE, 0xFF, 0xFF, 0xFF,                          // rank -2
      0x05, 0x00, 0x00, 0x00,                          // world size
      0x03, 0x00, 0x00, 0x00,                          // target rank
      0x07, 0x00, 0x00, 0x00,                          // reason
      0x01, 0x00, 0x00, 0x00,                          // flags: has a key
      0x01, 0x00, 0x00, 0x00,                          // lane: point to point
      0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,  // nonce
      0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF,  //
      0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7,  //
      0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF,  //
      0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7,  // mac
      0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE, 0xCF,  //
      0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7,  //
      0xD8, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF,  //
  };
  EXPECT_EQ(b, expected);
  EXPECT_EQ(kHelloSize, 112u);
}

TEST(WireHello, RoundTrips) {
  std::vector<Hello> cases = {Hello{}, sampleHello()};
  Hello h = sampleHello();
  h.kind = HelloKind::Accept;
  h.jobId = UINT64_MAX;
  h.commId = 0;
  h.rank = INT32_MAX;
  h.worldSize = INT32_MIN;
  h.targetRank = -1;
  cases.push_back(h);
  h = sampleHello();
  h.kind = HelloKind::Reject;
  h.reason = RejectReason::Duplicate;
  h.version = 0xBEEF;  // decode reports a version, it does not judge it
  cases.push_back(h);
  for (const Hello& c : cases) {
    const HelloBytes b = encode(c);
    Hello out;
    ASSERT_EQ(decodeHello(b.data(), &out), DecodeStatus::Ok);
    EXPECT_EQ(out, c);
  }
}

TEST(WireHello, RejectsStrangers) {
  HelloBytes b = encode(sampleHello());
  Hello out;
  out.rank = 77;
  for (size_t i = 0; i < 4; ++i) {
    HelloBytes bad = b;
    bad[i] = static_cast<uint8_t>(bad[i] + 1);
    EXPECT_EQ(decodeHello(bad.data(), &out), DecodeStatus::BadMagic) << "byte " << i;
  }
  // A message header is not a hello.
  HelloBytes hdr{};
  encodeHeader(sampleHeader(), hdr.data());
  EXPECT_EQ(decodeHello(hdr.data(), &out), DecodeStatus::BadMagic);
  for (uint16_t kind : {uint16_t{0}, uint16_t{6}, uint16_t{0x0100}, uint16_t{0xFFFF}}) {
    HelloBytes bad = b;
    bad[6] = static_cast<uint8_t>(kind & 0xFF);
    bad[7] = static_cast<uint8_t>(kind >> 8);
    EXPECT_EQ(decodeHello(bad.data(), &out), DecodeStatus::BadKind) << "kind " << kind;
  }
  EXPECT_EQ(out.rank, 77) << "a rejected hello must not be written out";
}

TEST(WireHello, CheckAcceptsTheRightPeer) {
  // Rank 2 of 5 says hello to rank 3.
  EXPECT_EQ(checkHello(sampleHello(), 0x0102030405060708, 0x1112131415161718, 3, 5),
            RejectReason::None);
  // Rank 0 and rank n-1 are in range.
  Hello h = sampleHello();
  h.rank = 0;
  EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::None);
  h.rank = 4;
  EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::None);
  // Both lanes: collectives (0) and point to point (1).
  h.lane = 1;
  EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::None);
}

TEST(WireHello, CheckRejectsAnUnknownLane) {
  Hello h = sampleHello();
  for (uint32_t lane : {2u, 3u, 255u, 0x80000000u, UINT32_MAX}) {
    h.lane = lane;
    EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::BadLane) << "lane " << lane;
  }
  // The lane is judged last: a stranger's other faults are named first.
  h.jobId ^= 1;
  EXPECT_EQ(checkHello(h, h.jobId ^ 1, h.commId, 3, 5), RejectReason::WrongJob);
  // It travels at offset 44.
  h = sampleHello();
  h.lane = 0x04030201;
  const HelloBytes b = encode(h);
  EXPECT_EQ(b[44], 0x01);
  EXPECT_EQ(b[47], 0x04);
  Hello out;
  ASSERT_EQ(decodeHello(b.data(), &out), DecodeStatus::Ok);
  EXPECT_EQ(out.lane, 0x04030201u);
}

// Several sockets per peer (docs/nsocks.md): byte 1 of the lane field is the stripe,
// byte 2 the socket count minus 1; one socket is the lane alone, the bytes of before.
TEST(WireHello, LaneFieldCarriesStripeAndSocketCount) {
  EXPECT_EQ(laneField(0, 0, 1), 0u);
  EXPECT_EQ(laneField(1, 0, 1), 1u);
  EXPECT_EQ(laneField(0, 3, 4), 0x00030300u);
  EXPECT_EQ(laneField(0, 15, 16), 0x000F0F00u);
  for (int k = 1; k <= kMaxStripes; ++k) {
    for (int s = 0; s < k; ++s) {
      const uint32_t f = laneField(0, s, k);
      EXPECT_EQ(laneOf(f), 0u);
      EXPECT_EQ(stripeOf(f), s);
      EXPECT_EQ(stripesOf(f), k);
      EXPECT_TRUE(validLaneField(f));
      Hello h = sampleHello();
      h.lane = f;
      EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::None) << f;
      const HelloBytes b = encode(h);
      EXPECT_EQ(b[44], 0);
      EXPECT_EQ(b[45], s);
      EXPECT_EQ(b[46], k - 1);
      EXPECT_EQ(b[47], 0);
    }
  }
  // Refused: a stripe at or beyond the count, more than 16 sockets, a striped p2p lane,
  // anything in byte 3.
  Hello h = sampleHello();
  for (uint32_t bad : {laneField(0, 4, 4), laneField(0, 1, 1), 0x00100000u, 0x00FF0000u,
                       laneField(1, 0, 2), laneField(1, 1, 2), 0x01000000u | laneField(0, 0, 2)}) {
    h.lane = bad;
    EXPECT_FALSE(validLaneField(bad)) << bad;
    EXPECT_EQ(checkHello(h, h.jobId, h.commId, 3, 5), RejectReason::BadLane) << bad;
  }
  EXPECT_NE(toString(RejectReason::NsocksDiffers).find("TCCL_NSOCKS"), std::string::npos);
}

TEST(WireHello, CheckNamesEachBadField) {
  const uint64_t job = 0x0102030405060708;
  const uint64_t comm = 0x1112131415161718;
  const int me = 3;
  const int world = 5;
  auto check = [&](const Hello& h) { return checkHello(h, job, comm, me, world); };

  Hello h = sampleHello();
  h.version = kProtocolVersion + 1;
  EXPECT_EQ(check(h), RejectReason::BadVersion);
  h.version = 0;
  EXPECT_EQ(check(h), RejectReason::BadVersion);

  h = sampleHello();
  h.jobId = job + 1;
  EXPECT_EQ(check(h), RejectReason::WrongJob);

  h = sampleHello();
  h.commId = comm ^ (uint64_t{1} << 63);
  EXPECT_EQ(check(h), RejectReason::WrongCommunicator);

  h = sampleHello();
  h.worldSize = 4;
  EXPECT_EQ(check(h), RejectReason::WrongWorldSize);
  h.worldSize = 6;
  EXPECT_EQ(check(h), RejectReason::WrongWorldSize);

  for (int rank : {-1, 5, 6, INT32_MIN, INT32_MAX, me}) {
    h = sampleHello();
    h.rank = rank;
    EXPECT_EQ(check(h), RejectReason::BadRank) << "rank " << rank;
  }

  for (int target : {2, 4, -1, 5}) {
    h = sampleHello();
    h.targetRank = target;
    EXPECT_EQ(check(h), RejectReason::WrongTarget) << "target " << target;
  }
}

TEST(WireHello, ReasonNames) {
  std::set<std::string_view> names;
  for (uint32_t r = 0; r <= 13; ++r) {
    const std::string_view name = toString(static_cast<RejectReason>(r));
    EXPECT_NE(name, "unknown reason") << r;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 14u) << "two reasons share a description";
  EXPECT_EQ(toString(static_cast<RejectReason>(99)), "unknown reason");
}

// hash64 is FNV-1a 64 as documented, so other tools can compute communicator ids.
TEST(WireHash, Fnv1aTestVectors) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(hash64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(hash64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hash64("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(hash64("world/0"), hash64("world/1"));
}

TEST(WireFingerprint, EverySignatureFieldMatters) {
  const uint32_t base = fingerprint("allreduce", 1, 3, 0, 1000, -1);
  EXPECT_EQ(fingerprint("allreduce", 1, 3, 0, 1000, -1), base) << "not deterministic";
  struct Variant {
    const char* what;
    uint32_t fp;
  };
  const Variant variants[] = {
      {"collective", fingerprint("broadcast", 1, 3, 0, 1000, -1)},
      {"collective case", fingerprint("Allreduce", 1, 3, 0, 1000, -1)},
      {"collective suffix", fingerprint("allreduce2", 1, 3, 0, 1000, -1)},
      {"algorithm", fingerprint("allreduce", 2, 3, 0, 1000, -1)},
      {"algorithm auto", fingerprint("allreduce", 0, 3, 0, 1000, -1)},
      {"dtype", fingerprint("allreduce", 1, 2, 0, 1000, -1)},
      {"op", fingerprint("allreduce", 1, 3, 4, 1000, -1)},
      {"count +1", fingerprint("allreduce", 1, 3, 0, 1001, -1)},
      {"count high bit", fingerprint("allreduce", 1, 3, 0, 1000 + (uint64_t{1} << 40), -1)},
      {"count 0", fingerprint("allreduce", 1, 3, 0, 0, -1)},
      {"root 0", fingerprint("allreduce", 1, 3, 0, 1000, 0)},
      {"root 1", fingerprint("allreduce", 1, 3, 0, 1000, 1)},
  };
  std::set<uint32_t> seen = {base};
  for (const Variant& v : variants) {
    EXPECT_NE(v.fp, base) << v.what;
    seen.insert(v.fp);
  }
  EXPECT_EQ(seen.size(), 1 + sizeof(variants) / sizeof(variants[0])) << "two variants collide";
  // Moving a byte from one field to the next must not collide either.
  EXPECT_NE(fingerprint("allreduce", 1, 2, 3, 1000, -1),
            fingerprint("allreduce", 2, 1, 3, 1000, -1));
  EXPECT_NE(fingerprint("allreduce", 1, 3, 0, 1, 0), fingerprint("allreduce", 1, 3, 0, 0, 1));
}

TEST(WireFingerprint, FewCollisionsOverCounts) {
  // 32 bits over 20000 counts: a collision is possible (p ~ 5%) but many are a bug.
  std::set<uint32_t> seen;
  for (uint64_t c = 0; c < 20000; ++c) seen.insert(fingerprint("allreduce", 1, 0, 0, c, -1));
  EXPECT_GE(seen.size(), 19998u);
}

}  // namespace
}  // namespace tccl::wire
