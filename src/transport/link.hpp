// Links: one connection to one peer, as the executor and the p2p engine see it.
//
// A Link owns its connection (a TCP socket, or an in-memory pipe in unit tests) and is
// the only code that reads or writes it. Its users move framed messages (a 24-byte
// wire::MessageHeader, then `length` payload bytes when the kind carries one) with
// TxFrame / RxFrame below, which encode and decode the header, follow partial progress
// and count every byte into the link's counters: framing and counting live here and
// nowhere else.
//
// Everything is nonblocking. A user that made no progress waits for readiness with
// waitLinks(), which sleeps until one of the links it names can move in a wanted
// direction, a wake descriptor fires, or a deadline passes.
//
// Threading: a link is used by one thread at a time (its owner: the executor for a
// collectives lane, the p2p engine's driver for a p2p lane). Its counters may be read
// from any thread.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tccl/stats.hpp"
#include "tccl/types.hpp"
#include "transport/wire.hpp"

namespace tccl {

// The outcome of one nonblocking transfer.
enum class LinkStatus : uint8_t {
  Progress,  // some bytes moved (see the count)
  Blocked,   // nothing moved: the connection would block in that direction
  Closed,    // end of file (receive) or the peer is gone (send: EPIPE/ECONNRESET)
  Error,     // any other failure; errorText() says which
};

struct LinkIo {
  LinkStatus status = LinkStatus::Blocked;
  size_t bytes = 0;
};

// Byte counters that the owning thread bumps and any thread may read.
struct LinkCounters {
  std::atomic<uint64_t> payloadSent{0}, payloadRecv{0}, wireSent{0}, wireRecv{0};
  std::atomic<uint64_t> messagesSent{0}, messagesRecv{0};
  PeerCounters snapshot() const;
  void reset();
  void add(const PeerCounters& c);
};

// Which connection of a peer pair a link is.
enum class Lane : uint8_t { Collective = 0, P2P = 1 };

class Link {
 public:
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return peer_; }
  Lane lane() const { return lane_; }
  // The peer's ip:port as seen on the connection ("mem" for an in-memory link).
  const std::string& address() const { return address_; }
  LinkCounters& counters() { return counters_; }
  const LinkCounters& counters() const { return counters_; }

  // Raw nonblocking I/O (TxFrame / RxFrame use these; nothing else should).
  virtual LinkIo writev(const iovec* iov, int iovcnt) = 0;
  virtual LinkIo readv(const iovec* iov, int iovcnt) = 0;
  // Copies up to n bytes of pending input without consuming it.
  virtual LinkIo peek(uint8_t* buf, size_t n) = 0;
  // A readv that returned fewer bytes than it asked for left nothing to read (a TCP
  // socket's receive queue is drained by a read; an in-memory link with random partial
  // transfers, or a striped link, gives no such promise).
  virtual bool shortReadDrains() const { return false; }
  // One writev may carry the ends and starts of several framed messages
  // (TxFrame::pumpMany); false where the link cuts its byte stream at message headers
  // (a striped link reads each message's length from a writev's first bytes).
  virtual bool framesShareWrites() const { return true; }
  // Why the last transfer returned Closed or Error: "connection closed by the peer",
  // "connection reset by the peer", or the system's error text.
  virtual std::string errorText() const = 0;

  // Readiness: the descriptor to poll, and the events to ask for, to wait for the link
  // to become readable and/or writable (no direction: 0, which still reports a socket's
  // hang-up or error). afterWake() is called once the wait returned with events on this
  // link, before the next transfer (an in-memory link resets its event descriptor there).
  virtual int pollFd() const = 0;
  virtual short pollEvents(bool wantRead, bool wantWrite) const = 0;
  // A link whose writing waits on another descriptor than its reading (a striped link,
  // striped_link.hpp, blocked on one socket for each direction) names it here, with its
  // events; -1: writing waits on pollFd() too (a single connection).
  virtual int writePollFd() const { return -1; }
  virtual short writePollEvents() const { return 0; }
  virtual void afterWake() {}

  // Ends the link: the peer reads what was sent, then end of file (a half close). The
  // link stays readable until destroyed.
  virtual void shutdownWrite() = 0;
  // Not shut down (shutdownWrite) yet.
  virtual bool open() const = 0;

  // A message is half sent on this link: nothing else may be written until it is
  // finished (an abort then only closes the link).
  bool txPartial = false;

 protected:
  Link(int peer, Lane lane, std::string address)
      : peer_(peer), lane_(lane), address_(std::move(address)) {}

 private:
  int peer_;
  Lane lane_;
  std::string address_;
  LinkCounters counters_;
};

// Sends one framed message, as far as the link takes it each time pump() is called.
//   TxFrame tx; tx.start(header, payload);   // payload: header.length bytes
//   while (tx.pump(link).status == LinkStatus::Progress && !tx.done()) {}
class TxFrame {
 public:
  void start(const wire::MessageHeader& h, const uint8_t* payload);
  // Moves bytes; counts them (payload and wire) and the message once done.
  LinkIo pump(Link& link);
  bool idle() const { return !active_; }
  bool done() const { return active_ && sent_ == total_; }
  // Header plus payload bytes handed to the link so far / in all.
  size_t sent() const { return sent_; }
  size_t total() const { return total_; }
  void reset() { active_ = false; }
  const wire::MessageHeader& header() const { return header_; }
  // Hands the rest of several messages to the link with one writev, in order: frames[0]
  // may be partly sent, the others not yet started (the link must allow it:
  // Link::framesShareWrites). Counts as pump() does, for each frame the bytes it took
  // and the messages finished; afterwards each frame's done() says whether it is all
  // out. At most kMaxFramesPerWrite frames.
  static constexpr size_t kMaxFramesPerWrite = 64;
  static LinkIo pumpMany(Link& link, TxFrame* const* frames, size_t n);

 private:
  wire::MessageHeader header_;
  uint8_t bytes_[wire::kHeaderSize] = {};
  const uint8_t* payload_ = nullptr;
  size_t sent_ = 0;
  size_t total_ = 0;
  bool active_ = false;
};

// Receives one framed message: first its header, then (once the caller has chosen
// where the payload goes) its payload.
//   RxFrame rx;
//   rx.pumpHeader(link)  -> Progress with headerReady() once the 24 bytes are in
//   rx.header()          -> decoded (decodeStatus() says whether it decoded)
//   rx.setTarget(ptr)    -> where the payload lands (length bytes)
//   rx.pumpPayload(link) -> Progress with done() once the payload is in
// When the caller passes a target before the header is complete (the executor knows
// its next message's size), pumpHeader reads header and payload in one readv.
class RxFrame {
 public:
  // Reads header bytes (and, with expectTarget/expectLength set, the payload too).
  LinkIo pumpHeader(Link& link);
  bool headerReady() const { return got_ >= wire::kHeaderSize; }
  wire::DecodeStatus decodeStatus() const { return status_; }
  const wire::MessageHeader& header() const { return header_; }
  // Optional, before the header is in: the payload's expected place and size, so that
  // one readv takes both (a mismatching header is reported by the caller, who must not
  // then pump a longer payload into that target; bytes read beyond the header sit in
  // the target, which becomes the payload's target unless setTarget names another).
  void expect(uint8_t* target, size_t length) {
    expectTarget_ = target;
    expectLength_ = length;
  }
  void setTarget(uint8_t* target) { target_ = target; }
  LinkIo pumpPayload(Link& link);
  // Read-ahead (the p2p engine's; the collectives read exactly what their schedule
  // expects): every read also takes up to `bytes` beyond what this frame needs into a
  // stage, and later frames are served from the stage before the socket, so a small
  // message costs one readv instead of two (header, then payload) and a chunk's read
  // brings the next header with it. Bytes are counted when a frame takes them from the
  // stage, so counters attribute them to the message they belong to. While bytes are
  // staged the link's descriptor may poll idle: pump until Blocked before waiting (a
  // pump returns Blocked only with the stage empty). Not with expect().
  void enableReadAhead(size_t bytes) { stage_.resize(bytes); }
  // Bytes read from the link and not yet taken by a frame.
  size_t staged() const { return stageEnd_ - stagePos_; }
  // With read-ahead: the last read from the link found nothing, or (on a link whose
  // shortReadDrains()) took less than it asked for, so the connection's receive queue
  // was empty then: a reader that has consumed the stage can wait for readiness rather
  // than try another read (which would most likely return EAGAIN: a system call and the
  // socket's lock for nothing).
  bool drained() const { return drained_ && staged() == 0; }
  // The whole message (header and payload) is in.
  bool done() const;
  // Payload bytes received so far.
  size_t payloadGot() const { return got_ > wire::kHeaderSize ? got_ - wire::kHeaderSize : 0; }
  // Bytes of this message read so far (header + payload).
  size_t got() const { return got_; }
  void reset();

 private:
  // The header's payload bytes (0 until it is in and decoded, or for a kind without).
  size_t payloadLength() const;
  // Counts the message once it is complete.
  void finishIfDone(Link& link);
  // Up to `want` bytes into dst: from the stage if it holds any, else from the link
  // (with the stage behind dst when read-ahead is on). io.bytes: the bytes put in dst.
  LinkIo readInto(Link& link, uint8_t* dst, size_t want);

  uint8_t bytes_[wire::kHeaderSize] = {};
  wire::MessageHeader header_;
  wire::DecodeStatus status_ = wire::DecodeStatus::Ok;
  uint8_t* target_ = nullptr;
  uint8_t* expectTarget_ = nullptr;
  size_t expectLength_ = 0;
  size_t got_ = 0;
  bool counted_ = false;
  std::vector<uint8_t> stage_;  // read-ahead (empty: off); survives reset()
  bool drained_ = false;        // drained(); survives reset()
  size_t stagePos_ = 0;
  size_t stageEnd_ = 0;
};

// Sleeps until one of `links` can move in a wanted direction (read / write), `wakeFd`
// (if >= 0) is readable, or `deadline` passes. Fills revents (the poll(2) events of the
// link's descriptor; an in-memory link reports POLLIN for any change). Returns false when
// the deadline passed with nothing ready (true may also mean a wait that ended early
// with nothing ready: the caller retries); *woken says whether wakeFd fired. Throws
// SystemError (message: the system's error text) if poll itself fails. afterWake() is
// called on every link that reported events (draining one that reported none could eat
// a wake-up that came after the poll).
struct LinkWait {
  Link* link = nullptr;
  bool read = false;
  bool write = false;
  short revents = 0;  // out
  // Input, end of file or an error may be waiting on the link (POLLIN, POLLHUP, POLLERR).
  bool stirred() const;
};
bool waitLinks(std::vector<LinkWait>& links, int wakeFd, Deadline deadline, bool* woken = nullptr);
// The same with several wake descriptors (those < 0 are ignored); *woken: any fired.
bool waitLinks(std::vector<LinkWait>& links, const std::vector<int>& wakeFds, Deadline deadline,
               bool* woken = nullptr);
// One look without waiting (a zero-timeout poll, no clock read), as a spin's round takes
// it: whether anything was ready. Fills revents, calls afterWake() and sets *woken as
// waitLinks does.
bool pollLinks(std::vector<LinkWait>& links, const std::vector<int>& wakeFds,
               bool* woken = nullptr);

// Where the executor gets its links: the transport (TCP, the collectives' lane) or, in
// unit tests, a set of in-memory links.
class LinkProvider {
 public:
  virtual ~LinkProvider() = default;
  // The link to `peer`; throws InvalidArgumentError when there is none.
  virtual Link& link(int peer) = 0;
  // The peers with an open link.
  virtual std::vector<int> connectedPeers() const = 0;
};

// Two in-memory links joined back to back (unit tests): what one writes the other
// reads. Each direction holds at most `capacity` bytes (a socket's buffer); with a
// seed, every transfer moves a random number of bytes between 1 and what it asked
// for (and what is there), so that tests see the partial reads and writes a socket
// gives. Each end polls its own eventfd, which the other end writes whenever it changes
// this end's readiness (data arrived, space freed, shut down, destroyed). Destroying an
// end closes it: the other end reads end of file after the queued data, and its writes
// fail with Closed.
struct MemLinkPair {
  std::unique_ptr<Link> a;  // rank `rankA`'s end: its peer() is rankB
  std::unique_ptr<Link> b;
};
MemLinkPair makeMemLinkPair(int rankA, int rankB, Lane lane, size_t capacity = 256 * 1024,
                            uint64_t seed = 0);

}  // namespace tccl
