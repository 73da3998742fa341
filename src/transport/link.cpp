#include "transport/link.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Counts n bytes moved at position `before` of a message: the part beyond the header is
// payload.
void countSent(LinkCounters& c, size_t before, size_t n) {
  const size_t hdr = before < wire::kHeaderSize ? std::min(n, wire::kHeaderSize - before) : 0;
  c.wireSent.fetch_add(n, kRelaxed);
  c.payloadSent.fetch_add(n - hdr, kRelaxed);
}

void countRecv(LinkCounters& c, size_t before, size_t n) {
  const size_t hdr = before < wire::kHeaderSize ? std::min(n, wire::kHeaderSize - before) : 0;
  c.wireRecv.fetch_add(n, kRelaxed);
  c.payloadRecv.fetch_add(n - hdr, kRelaxed);
}

}  // namespace

PeerCounters LinkCounters::snapshot() const {
  PeerCounters c;
  c.payloadSent = payloadSent.load(kRelaxed);
  c.payloadRecv = payloadRecv.load(kRelaxed);
  c.wireSent = wireSent.load(kRelaxed);
  c.wireRecv = wireRecv.load(kRelaxed);
  c.messagesSent = messagesSent.load(kRelaxed);
  c.messagesRecv = messagesRecv.load(kRelaxed);
  return c;
}

void LinkCounters::reset() {
  payloadSent.store(0, kRelaxed);
  payloadRecv.store(0, kRelaxed);
  wireSent.store(0, kRelaxed);
  wireRecv.store(0, kRelaxed);
  messagesSent.store(0, kRelaxed);
  messagesRecv.store(0, kRelaxed);
}

void LinkCounters::add(const PeerCounters& c) {
  payloadSent.fetch_add(c.payloadSent, kRelaxed);
  payloadRecv.fetch_add(c.payloadRecv, kRelaxed);
  wireSent.fetch_add(c.wireSent, kRelaxed);
  wireRecv.fetch_add(c.wireRecv, kRelaxed);
  messagesSent.fetch_add(c.messagesSent, kRelaxed);
  messagesRecv.fetch_add(c.messagesRecv, kRelaxed);
}

// ---- TxFrame ----------------------------------------------------------------------------

void TxFrame::start(const wire::MessageHeader& h, const uint8_t* payload) {
  header_ = h;
  wire::encodeHeader(h, bytes_);
  payload_ = payload;
  sent_ = 0;
  total_ = wire::kHeaderSize + (wire::carriesPayload(h.kind) ? static_cast<size_t>(h.length) : 0);
  active_ = true;
}

LinkIo TxFrame::pump(Link& link) {
  TxFrame* self = this;
  return pumpMany(link, &self, 1);
}

LinkIo TxFrame::pumpMany(Link& link, TxFrame* const* frames, size_t n) {
  iovec iov[2 * kMaxFramesPerWrite];
  int iovcnt = 0;
  n = std::min(n, kMaxFramesPerWrite);
  for (size_t i = 0; i < n; ++i) {
    const TxFrame& f = *frames[i];
    if (!f.active_ || f.sent_ == f.total_) continue;
    const size_t payloadLen = f.total_ - wire::kHeaderSize;
    if (f.sent_ < wire::kHeaderSize) {
      iov[iovcnt++] = {const_cast<uint8_t*>(f.bytes_) + f.sent_, wire::kHeaderSize - f.sent_};
      if (payloadLen > 0) iov[iovcnt++] = {const_cast<uint8_t*>(f.payload_), payloadLen};
    } else {
      const size_t off = f.sent_ - wire::kHeaderSize;
      iov[iovcnt++] = {const_cast<uint8_t*>(f.payload_) + off, payloadLen - off};
    }
  }
  if (iovcnt == 0) return {LinkStatus::Progress, 0};
  const LinkIo io = link.writev(iov, iovcnt);
  if (io.status != LinkStatus::Progress) return io;
  size_t left = io.bytes;
  for (size_t i = 0; i < n && left > 0; ++i) {
    TxFrame& f = *frames[i];
    if (!f.active_ || f.sent_ == f.total_) continue;
    const size_t take = std::min(left, f.total_ - f.sent_);
    countSent(link.counters(), f.sent_, take);
    f.sent_ += take;
    left -= take;
    link.txPartial = f.sent_ < f.total_;
    if (!link.txPartial) link.counters().messagesSent.fetch_add(1, kRelaxed);
  }
  return io;
}

// ---- RxFrame ----------------------------------------------------------------------------

size_t RxFrame::payloadLength() const {
  if (!headerReady() || status_ != wire::DecodeStatus::Ok) return 0;
  return wire::carriesPayload(header_.kind) ? static_cast<size_t>(header_.length) : 0;
}

bool RxFrame::done() const {
  return headerReady() && status_ == wire::DecodeStatus::Ok &&
         got_ >= wire::kHeaderSize + payloadLength();
}

void RxFrame::finishIfDone(Link& link) {
  if (counted_ || !done()) return;
  link.counters().messagesRecv.fetch_add(1, kRelaxed);
  counted_ = true;
}

LinkIo RxFrame::readInto(Link& link, uint8_t* dst, size_t want) {
  if (staged() > 0) {
    const size_t n = std::min(staged(), want);
    std::memcpy(dst, stage_.data() + stagePos_, n);
    stagePos_ += n;
    if (stagePos_ == stageEnd_) stagePos_ = stageEnd_ = 0;
    return {LinkStatus::Progress, n};
  }
  iovec iov[2] = {{dst, want}, {stage_.data(), stage_.size()}};
  LinkIo io = link.readv(iov, stage_.empty() ? 1 : 2);
  drained_ = io.status == LinkStatus::Blocked ||
             (io.status == LinkStatus::Progress && !stage_.empty() &&
              io.bytes < want + stage_.size() && link.shortReadDrains());
  if (io.status == LinkStatus::Progress && io.bytes > want) {
    stagePos_ = 0;
    stageEnd_ = io.bytes - want;
    io.bytes = want;
  }
  return io;
}

LinkIo RxFrame::pumpHeader(Link& link) {
  if (headerReady()) return {LinkStatus::Progress, 0};
  LinkIo io;
  if (!stage_.empty()) {
    io = readInto(link, bytes_ + got_, wire::kHeaderSize - got_);
  } else {
    iovec iov[2];
    int iovcnt = 0;
    iov[iovcnt++] = {bytes_ + got_, wire::kHeaderSize - got_};
    if (expectLength_ > 0) iov[iovcnt++] = {expectTarget_, expectLength_};
    io = link.readv(iov, iovcnt);
  }
  if (io.status != LinkStatus::Progress) return io;
  countRecv(link.counters(), got_, io.bytes);
  got_ += io.bytes;
  if (headerReady()) {
    status_ = wire::decodeHeader(bytes_, &header_);
    if (target_ == nullptr) target_ = expectTarget_;
    finishIfDone(link);
  }
  return io;
}

LinkIo RxFrame::pumpPayload(Link& link) {
  if (!headerReady() || status_ != wire::DecodeStatus::Ok) return {LinkStatus::Error, 0};
  const size_t len = payloadLength();
  const size_t have = payloadGot();
  if (have >= len) {
    finishIfDone(link);
    return {LinkStatus::Progress, 0};
  }
  const LinkIo io = readInto(link, target_ + have, len - have);
  if (io.status != LinkStatus::Progress) return io;
  countRecv(link.counters(), got_, io.bytes);
  got_ += io.bytes;
  finishIfDone(link);
  return io;
}

void RxFrame::reset() {
  header_ = wire::MessageHeader{};
  status_ = wire::DecodeStatus::Ok;
  target_ = nullptr;
  expectTarget_ = nullptr;
  expectLength_ = 0;
  got_ = 0;
  counted_ = false;
}

// ---- waiting ----------------------------------------------------------------------------

bool LinkWait::stirred() const { return (revents & (POLLIN | POLLHUP | POLLERR)) != 0; }

namespace {

// One poll(2) over the links and the wake descriptors (those < 0 are ignored), with a
// timeout in ms (-1: none): the number of descriptors with events. The descriptor arrays
// are the calling thread's own and keep their capacity, so a spin's rounds and a loop of
// small calls' waits allocate nothing.
int pollOnce(std::vector<LinkWait>& links, std::span<const int> wakeFds, int timeoutMs,
             bool* woken) {
  // Links that wait for writing on a descriptor of their own (striped links): their
  // entries go after the wake descriptors.
  struct Writer {
    size_t link;  // index in links
    size_t at;    // index in fds
  };
  thread_local std::vector<pollfd> fds;
  thread_local std::vector<Writer> writers;
  fds.clear();
  writers.clear();
  for (LinkWait& w : links) {
    w.revents = 0;
    fds.push_back({w.link->pollFd(), w.link->pollEvents(w.read, w.write), 0});
  }
  for (int fd : wakeFds) {
    if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  }
  const size_t wakeEnd = fds.size();
  for (size_t i = 0; i < links.size(); ++i) {
    const int wfd = links[i].write ? links[i].link->writePollFd() : -1;
    if (wfd < 0) continue;
    writers.push_back({i, fds.size()});
    fds.push_back({wfd, links[i].link->writePollEvents(), 0});
  }
  if (woken) *woken = false;
  int n = 0;
  for (;;) {
    n = ::poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throwError(ErrorKind::System, net::errnoString(errno));
    break;
  }
  if (n == 0) return 0;
  for (size_t i = 0; i < links.size(); ++i) links[i].revents = fds[i].revents;
  for (const Writer& wr : writers) links[wr.link].revents |= fds[wr.at].revents;
  for (size_t i = 0; i < links.size(); ++i) {
    if (links[i].revents != 0) links[i].link->afterWake();
  }
  if (woken) {
    for (size_t i = links.size(); i < wakeEnd; ++i) *woken |= fds[i].revents != 0;
  }
  return n;
}

bool waitFor(std::vector<LinkWait>& links, std::span<const int> wakeFds, Deadline deadline,
             bool* woken) {
  if (pollOnce(links, wakeFds, deadline.pollTimeoutMs(), woken) > 0) return true;
  return !deadline.expired();
}

}  // namespace

bool waitLinks(std::vector<LinkWait>& links, int wakeFd, Deadline deadline, bool* woken) {
  return waitFor(links, std::span<const int>(&wakeFd, 1), deadline, woken);
}

bool waitLinks(std::vector<LinkWait>& links, const std::vector<int>& wakeFds, Deadline deadline,
               bool* woken) {
  return waitFor(links, wakeFds, deadline, woken);
}

bool pollLinks(std::vector<LinkWait>& links, const std::vector<int>& wakeFds, bool* woken) {
  return pollOnce(links, wakeFds, 0, woken) > 0;
}

}  // namespace tccl
