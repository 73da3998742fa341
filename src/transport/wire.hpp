// The wire format: pure encode/decode, no sockets (fuzzable, unit-tested).
//
// Every message on a rank-to-rank connection is a 24-byte header followed by
// `length` payload bytes. All integers little-endian.
//
//   offset size field
//   0      2    magic        0x54 0x43 ("TC")
//   2      1    kind         1 = data, 2 = abort (payload: UTF-8 reason)
//   3      1    flags        0 (reserved)
//   4      4    seq          collective sequence number on the communicator (mod 2^32)
//   8      4    fingerprint  hash of the collective's signature (see fingerprint())
//   12     4    step         the schedule step this message belongs to
//   16     8    length       payload bytes that follow
//
// Every connection starts with a 40-byte handshake in each direction (Hello):
//
//   0  4 magic "TCCL"      4  2 version (1)     6  2 kind (1 hello, 2 accept, 3 reject)
//   8  8 job id            16 8 communicator id (hash of the communicator's name)
//   24 4 rank (sender)     28 4 world size      32 4 target rank    36 4 reason (reject)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tccl::wire {

constexpr size_t kHeaderSize = 24;
constexpr uint16_t kHeaderMagic = 0x4354;  // "TC" little-endian
// A payload larger than this is rejected before anything is allocated or read.
constexpr uint64_t kMaxPayload = uint64_t{1} << 40;

enum class MsgKind : uint8_t { Data = 1, Abort = 2 };

struct MessageHeader {
  MsgKind kind = MsgKind::Data;
  uint8_t flags = 0;
  uint32_t seq = 0;
  uint32_t fingerprint = 0;
  uint32_t step = 0;
  uint64_t length = 0;
  bool operator==(const MessageHeader&) const = default;
};

enum class DecodeStatus { Ok, BadMagic, BadKind, TooLong };
std::string_view toString(DecodeStatus s);

void encodeHeader(const MessageHeader& h, uint8_t out[kHeaderSize]);
DecodeStatus decodeHeader(const uint8_t in[kHeaderSize], MessageHeader* out);

// ---- handshake ----
constexpr size_t kHelloSize = 40;
constexpr uint32_t kHelloMagic = 0x4C434354;  // "TCCL" little-endian
constexpr uint16_t kProtocolVersion = 1;

enum class HelloKind : uint16_t { Hello = 1, Accept = 2, Reject = 3 };
enum class RejectReason : uint32_t {
  None = 0,
  BadMagic = 1,
  BadVersion = 2,
  WrongJob = 3,
  WrongCommunicator = 4,
  WrongWorldSize = 5,
  BadRank = 6,
  WrongTarget = 7,
  Duplicate = 8,
};
std::string_view toString(RejectReason r);

struct Hello {
  uint16_t version = kProtocolVersion;
  HelloKind kind = HelloKind::Hello;
  uint64_t jobId = 0;
  uint64_t commId = 0;
  int32_t rank = -1;
  int32_t worldSize = 0;
  int32_t targetRank = -1;
  RejectReason reason = RejectReason::None;
  bool operator==(const Hello&) const = default;
};

void encodeHello(const Hello& h, uint8_t out[kHelloSize]);
// Decodes without judging the content; returns BadMagic for a stranger's bytes and
// BadKind for an unknown kind. Version is reported, not checked.
DecodeStatus decodeHello(const uint8_t in[kHelloSize], Hello* out);

// What a receiver expects of a hello from a would-be peer. Returns None if it is
// acceptable, else the reason to reject it.
RejectReason checkHello(const Hello& h, uint64_t jobId, uint64_t commId, int myRank, int worldSize);

// 64-bit FNV-1a over the signature fields, folded to 32 bits (high ^ low); any difference in
// collective, algorithm, dtype, op, count or root changes it with overwhelming probability.
uint32_t fingerprint(std::string_view collective, uint8_t algorithm, uint8_t dtype, uint8_t op,
                     uint64_t count, int32_t root);
uint64_t hash64(std::string_view s);

}  // namespace tccl::wire
