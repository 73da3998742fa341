// The wire format: pure encode/decode, no sockets (fuzzable, unit-tested).
//
// Every message on a rank-to-rank connection is a 24-byte header followed by
// `length` payload bytes. All integers little-endian.
//
//   offset size field
//   0      2    magic        0x54 0x43 ("TC")
//   2      1    kind         1 = data, 2 = abort (no payload; see below); 3-7 = the
//                            point-to-point protocol's messages (below)
//   3      1    flags        bit 0: point to point; bit 1: payload striped across the
//                            connection's sockets (striped_link.hpp; lane 0 with
//                            TCCL_NSOCKS > 1 only, never seen above the link)
//   4      4    seq          collective sequence number on the communicator (mod 2^32)
//   8      4    fingerprint  hash of the collective's signature (see fingerprint())
//   12     4    step         the schedule step this message belongs to
//   16     8    length       payload bytes that follow
//
// Point-to-point messages travel on their own connection per peer pair (the p2p lane),
// never on the collectives' one, so that a collective's stream is read only by the
// collective it belongs to. Their fields (docs/protocol.md, "Point to point"):
//   kind    seq       fingerprint  step     length                       payload
//   Eager   tag       0            send id  message bytes                the message
//   Rts     tag       0            send id  message bytes                none
//   Cts     0         receive id   send id  0                            none
//   Chunk   0         receive id   send id  chunk bytes                  the chunk
//   Credit  0         0            0        eager bytes given back       none
//   Cancel  0         0            send id  0                            none
//
// Every connection starts with a handshake of 112-byte messages (Hello):
//
//   0  4 magic "TCCL"      4  2 version (2)     6  2 kind (1 hello, 2 accept, 3 reject,
//                                                          4 challenge, 5 proof)
//   8  8 job id            16 8 communicator id (hash of the communicator's name)
//   24 4 rank (sender)     28 4 world size      32 4 target rank    36 4 reason (reject)
//   40 4 flags (bit 0: the sender has an auth key)                  44 4 lane field: byte 0
//        the lane (0 collectives, 1 point to point), byte 1 the socket's stripe index,
//        byte 2 the number of sockets minus 1 (TCCL_NSOCKS - 1), byte 3 zero; one socket
//        per lane (NSOCKS=1) is exactly the lane, as before stripes existed
//   48 32 nonce (hello: the dialler's; challenge: the acceptor's)
//   80 32 mac (challenge: the acceptor's HMAC; proof: the dialler's; see auth/auth.hpp)
//
// The first 40 bytes have the layout of version 1's whole message, so a version-1 peer
// reads a version-2 Reject(BadVersion) correctly. docs/protocol.md has the sequence.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tccl::wire {

constexpr size_t kHeaderSize = 24;
constexpr uint16_t kHeaderMagic = 0x4354;  // "TC" little-endian
// A payload larger than this is rejected before anything is allocated or read.
constexpr uint64_t kMaxPayload = uint64_t{1} << 40;

enum class MsgKind : uint8_t {
  Data = 1,
  Abort = 2,
  Eager = 3,   // p2p: a small message, sent before its receive is known to be posted
  Rts = 4,     // p2p: request to send a large message
  Cts = 5,     // p2p: clear to send, once the receive is posted
  Chunk = 6,   // p2p: part of a large message, into the posted receive's buffer
  Credit = 7,  // p2p: eager-pool bytes the receiver has freed
  Cancel = 8,  // p2p: the sender gave up on a request to send (deadline)
};
// Whether `length` payload bytes follow a header of this kind (Rts announces a size
// without sending it).
constexpr bool carriesPayload(MsgKind k) {
  return k == MsgKind::Data || k == MsgKind::Eager || k == MsgKind::Chunk;
}

// An Abort message has no payload; its fields carry the cause as far as the sender
// knows it (the full record is in the store, see docs/errors.md):
//   seq: the sender's collective sequence number, fingerprint: the culprit rank
//   (kNoCulprit: not known yet), step: the ErrorKind of the cause.
constexpr uint32_t kNoCulprit = 0xFFFFFFFFu;

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
constexpr size_t kHelloSize = 112;
constexpr size_t kHelloSizeV1 = 40;  // version 1's whole message (no auth fields)
// magic + version + kind: enough to tell a stranger, a version and how much follows.
constexpr size_t kHelloPrefixSize = 8;
constexpr uint32_t kHelloMagic = 0x4C434354;  // "TCCL" little-endian
constexpr uint16_t kProtocolVersion = 2;
constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;
constexpr uint32_t kHelloFlagAuth = 1;  // the sender has an auth key

// Hello: dialler's opening. Accept / Reject: the acceptor's verdict (or, for a Reject,
// the dialler's refusal of a Challenge). Challenge: the acceptor proves itself and asks
// the dialler to. Proof: the dialler's answer.
enum class HelloKind : uint16_t { Hello = 1, Accept = 2, Reject = 3, Challenge = 4, Proof = 5 };
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
  AuthRequired = 9,      // the rejecting side has a key; the other has none
  AuthUnsupported = 10,  // the other side has a key; the rejecting side has none
  AuthFailed = 11,       // a MAC did not verify: the keys differ
  Unexpected = 12,       // a handshake message out of order
  BadLane = 13,          // a lane other than 0 (collectives) or 1 (point to point)
  NsocksDiffers = 14,    // the two sides' TCCL_NSOCKS differ (the Reject's lane field
                         // carries the rejecting side's count)
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
  uint32_t flags = 0;
  uint32_t lane = 0;  // the lane field: laneOf() 0 collectives, 1 point to point (below)
  std::array<uint8_t, kNonceSize> nonce{};
  std::array<uint8_t, kMacSize> mac{};
  bool operator==(const Hello&) const = default;
};

// The Hello's 32-bit lane field: lane | stripe << 8 | (stripes - 1) << 16. With one
// socket per lane it is the lane alone, so TCCL_NSOCKS=1 puts the bytes of before on the
// wire, and a peer of before refuses a striped Hello as BadLane.
constexpr int kMaxStripes = 16;
constexpr uint32_t laneField(uint32_t lane, int stripe, int stripes) {
  return lane | static_cast<uint32_t>(stripe) << 8 | static_cast<uint32_t>(stripes - 1) << 16;
}
constexpr uint32_t laneOf(uint32_t field) { return field & 0xFF; }
constexpr int stripeOf(uint32_t field) { return static_cast<int>((field >> 8) & 0xFF); }
constexpr int stripesOf(uint32_t field) { return static_cast<int>((field >> 16) & 0xFF) + 1; }
// A lane field this version understands: lane 0 or 1, byte 3 zero, at most kMaxStripes
// sockets, the stripe index below their count, and the p2p lane on one socket.
constexpr bool validLaneField(uint32_t field) {
  return laneOf(field) <= 1 && (field >> 24) == 0 && stripesOf(field) <= kMaxStripes &&
         stripeOf(field) < stripesOf(field) && (laneOf(field) == 0 || stripesOf(field) == 1);
}

// MessageHeader::flags bit 1: the payload is striped (see striped_link.hpp).
constexpr uint8_t kFlagStriped = 2;

void encodeHello(const Hello& h, uint8_t out[kHelloSize]);
// Decodes without judging the content; returns BadMagic for a stranger's bytes and
// BadKind for an unknown kind. Version is reported, not checked.
DecodeStatus decodeHello(const uint8_t in[kHelloSize], Hello* out);

// Judges the first n bytes of a handshake message as they arrive, so that a stranger is
// turned away at its first wrong byte. Returns false if the bytes cannot start a tccl
// handshake message (wrong magic); with n >= kHelloPrefixSize sets *version (when
// non-null) to the version field, which tells how long the message is (kHelloSize for
// kProtocolVersion, kHelloSizeV1 for 1, unknown for others).
bool plausibleHelloPrefix(const uint8_t* in, size_t n, uint16_t* version = nullptr);

// What a receiver expects of a hello from a would-be peer. Returns None if it is
// acceptable, else the reason to reject it. (Authentication, and whether that rank is
// already connected on that lane, are judged separately.)
RejectReason checkHello(const Hello& h, uint64_t jobId, uint64_t commId, int myRank, int worldSize);

// 64-bit FNV-1a over the signature fields, folded to 32 bits (high ^ low); any difference in
// collective, algorithm, dtype, op, count or root changes it with overwhelming probability.
uint32_t fingerprint(std::string_view collective, uint8_t algorithm, uint8_t dtype, uint8_t op,
                     uint64_t count, int32_t root);
uint64_t hash64(std::string_view s);

}  // namespace tccl::wire
