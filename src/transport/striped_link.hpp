// A link over several connections to one peer (TCCL_NSOCKS > 1, docs/nsocks.md).
//
// Why: one TCP stream is capped by what a single flow gets (a per-flow rate limit, a
// flow-hashing switch, one core's worth of TCP processing). K streams carrying parts
// of a large message at once get up to K times that.
//
// To its users a StripedLink is one ordered byte stream, like a TcpLink: TxFrame and
// RxFrame frame and count messages on it unchanged, and its counters count every byte
// on every one of its sockets (it adds no bytes of its own). Underneath, the link
// follows the framing it carries, and places each logical byte on one stripe by a rule
// both ends derive from the message alone:
//   - headers, and every message that is not striped, travel on stripe 0;
//   - a striped message (header flag kFlagStriped, set by the sender when its payload
//     is at least the link's threshold, stripeMinBytes, and never below
//     kStripeFloorBytes) has its payload cut into chunks of
//         c = min(ceil(L / K), kStripeChunkMax)
//     bytes, and chunk j = [j c, min(L, (j+1) c)) travels on stripe j mod K. So chunk 0
//     follows its header on stripe 0, and a message of up to K x kStripeChunkMax bytes
//     is K contiguous parts, one per socket.
// The receiver reads the flag from stripe 0 and clears it: the header its user reads is
// the one the sender's user wrote. The sender's threshold need not be the receiver's.
//
// Bytes are handed to the sockets in logical order: a write stops at the first socket
// that is full, a read at the first that is empty. The sockets still carry a message
// in parallel, because each one's kernel buffers hold its chunk while the link moves
// on to the next (a chunk is at most kStripeChunkMax). In exchange the link needs no
// buffer of its own, never acknowledges a byte it has not handed to a socket, and
// waits for exactly one socket per direction: pollFd() is the socket the next byte is
// read from, writePollFd() the one the next byte is written to.
//
// Contract with the writer: at a message's start a writev hands at least the whole
// 24-byte header (TxFrame does); the link reads the header's length from it.
// peek() is meant for message boundaries (the executor's idle watch): it shows stripe
// 0's next bytes with the striped flag cleared.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/link.hpp"

namespace tccl {

// The largest chunk of a striped payload on one socket.
constexpr uint64_t kStripeChunkMax = 256 * 1024;
// No payload below this is striped (a protocol constant, so that a receiver may read a
// short message whole with its header, without knowing the sender's threshold).
constexpr uint64_t kStripeFloorBytes = 4096;

// How a striped payload of `length` bytes lies on `stripes` sockets.
struct StripePlan {
  uint64_t length = 0;
  int stripes = 1;
  uint64_t chunk = 0;  // min(ceil(length / stripes), kStripeChunkMax); 0 when length is 0
  // The stripe carrying payload byte `offset`, and the end of its chunk.
  int stripeAt(uint64_t offset) const {
    return static_cast<int>((offset / chunk) % static_cast<uint64_t>(stripes));
  }
  uint64_t chunkEnd(uint64_t offset) const {
    const uint64_t end = (offset / chunk + 1) * chunk;
    return end < length ? end : length;
  }
  // Payload bytes stripe `s` carries in all.
  uint64_t bytesOn(int s) const;
};
StripePlan planStripes(uint64_t length, int stripes);
// The sender's rule: a data message whose payload is at least max(minBytes,
// kStripeFloorBytes), on more than one socket.
bool stripesMessage(const wire::MessageHeader& h, int stripes, uint64_t minBytes);

class StripedLink final : public Link {
 public:
  // `stripes`: the connections, in stripe order (stripe 0 first); at least 2. Messages
  // this side writes are striped from stripeMinBytes up (UINT64_MAX: never).
  StripedLink(int peer, Lane lane, std::string address, std::vector<std::unique_ptr<Link>> stripes,
              uint64_t stripeMinBytes);

  LinkIo writev(const iovec* iov, int iovcnt) override;
  LinkIo readv(const iovec* iov, int iovcnt) override;
  LinkIo peek(uint8_t* buf, size_t n) override;
  std::string errorText() const override;
  bool framesShareWrites() const override { return false; }

  int pollFd() const override { return stripes_[readStripe_]->pollFd(); }
  short pollEvents(bool wantRead, bool wantWrite) const override {
    return stripes_[readStripe_]->pollEvents(wantRead, wantWrite && writeStripe_ == readStripe_);
  }
  int writePollFd() const override {
    return writeStripe_ == readStripe_ ? -1 : stripes_[writeStripe_]->pollFd();
  }
  short writePollEvents() const override { return stripes_[writeStripe_]->pollEvents(false, true); }
  void afterWake() override;

  void shutdownWrite() override;
  bool open() const override { return stripes_[0]->open(); }

  int stripeCount() const { return static_cast<int>(stripes_.size()); }
  uint64_t stripeMinBytes() const { return minBytes_; }

 private:
  // One direction's place in its current message.
  struct Cursor {
    uint8_t header[wire::kHeaderSize] = {};
    size_t pos = 0;  // bytes of the message (header + payload) moved so far
    uint64_t length = 0;
    bool striped = false;
    StripePlan plan;
    size_t total() const { return wire::kHeaderSize + length; }
    // The stripe that carries the message's next byte.
    int stripe() const;
    // Bytes from pos up to the end of that stripe's current run.
    uint64_t run() const;
  };
  // The header in c.header is complete: learn its length and layout. False: not a
  // header this link can follow.
  bool beginMessage(Cursor& c, bool writing);
  LinkIo fail(size_t moved, LinkIo io, int stripe);
  LinkIo failText(size_t moved, std::string text);

  std::vector<std::unique_ptr<Link>> stripes_;
  uint64_t minBytes_;
  Cursor w_, r_;
  int readStripe_ = 0, writeStripe_ = 0;
  bool broken_ = false;  // the read side lost its place (a message not as announced)
  int errStripe_ = -1;   // the socket of the last Closed / Error, or -1 for errText_
  std::string errText_;
};

}  // namespace tccl
