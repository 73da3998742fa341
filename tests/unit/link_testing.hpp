// What the link tests share (link_test.cpp, striped_link_test.cpp, transport_test.cpp): a
// framed message, and one sent or received whole over a nonblocking link, waiting for
// readiness with waitLinks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.hpp"

namespace tccl::testing {

struct Message {
  wire::MessageHeader header;
  std::vector<uint8_t> payload;
};

// The bytes of m that go on the wire after its header (none for a header-only kind).
inline size_t payloadOf(const Message& m) {
  return wire::carriesPayload(m.header.kind) ? m.payload.size() : 0;
}

// Passes everything to the link it wraps; a test overrides what it watches.
class ForwardingLink : public Link {
 public:
  explicit ForwardingLink(std::unique_ptr<Link> inner)
      : Link(inner->peer(), inner->lane(), inner->address()), inner_(std::move(inner)) {}
  LinkIo writev(const iovec* iov, int n) override { return inner_->writev(iov, n); }
  LinkIo readv(const iovec* iov, int n) override { return inner_->readv(iov, n); }
  LinkIo peek(uint8_t* buf, size_t n) override { return inner_->peek(buf, n); }
  bool shortReadDrains() const override { return inner_->shortReadDrains(); }
  bool framesShareWrites() const override { return inner_->framesShareWrites(); }
  std::string errorText() const override { return inner_->errorText(); }
  int pollFd() const override { return inner_->pollFd(); }
  short pollEvents(bool r, bool w) const override { return inner_->pollEvents(r, w); }
  int writePollFd() const override { return inner_->writePollFd(); }
  short writePollEvents() const override { return inner_->writePollEvents(); }
  void afterWake() override { inner_->afterWake(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  bool open() const override { return inner_->open(); }

 private:
  std::unique_ptr<Link> inner_;
};

// Sends one message, waiting for room whenever the link is full.
inline LinkStatus sendFrame(Link& link, const wire::MessageHeader& h, const uint8_t* payload,
                            Deadline deadline) {
  TxFrame tx;
  tx.start(h, payload);
  while (!tx.done()) {
    const LinkIo io = tx.pump(link);
    if (io.status == LinkStatus::Progress) continue;
    if (io.status != LinkStatus::Blocked) return io.status;
    std::vector<LinkWait> w = {{&link, false, true, 0}};
    if (!waitLinks(w, -1, deadline)) return LinkStatus::Blocked;
  }
  return LinkStatus::Progress;
}

// Receives one message with rx (already reset, and given expect() if wanted); onHeader(rx)
// runs once its header is in and decoded, and may set the payload's target.
template <typename OnHeader>
LinkStatus recvFrameWith(Link& link, RxFrame& rx, Deadline deadline, OnHeader onHeader) {
  for (;;) {
    const bool inHeader = !rx.headerReady();
    const LinkIo io = inHeader ? rx.pumpHeader(link) : rx.pumpPayload(link);
    if (io.status == LinkStatus::Progress) {
      if (inHeader && rx.headerReady()) {
        if (rx.decodeStatus() != wire::DecodeStatus::Ok) return LinkStatus::Error;
        onHeader(rx);
      }
      if (rx.done()) return LinkStatus::Progress;
      continue;
    }
    if (io.status != LinkStatus::Blocked) return io.status;
    std::vector<LinkWait> w = {{&link, true, false, 0}};
    if (!waitLinks(w, -1, deadline)) return LinkStatus::Blocked;
  }
}

// Receives one message into `target` (which must hold `expectLength` bytes, or the
// header's length when expectLength is 0: the target is then set after the header).
inline LinkStatus recvFrame(Link& link, RxFrame& rx, uint8_t* target, size_t expectLength,
                            Deadline deadline) {
  rx.reset();
  if (expectLength > 0) rx.expect(target, expectLength);
  return recvFrameWith(link, rx, deadline, [&](RxFrame& r) {
    if (expectLength == 0) r.setTarget(target);
  });
}

// Receives one message of any size: its header into *h, its payload into *payload (sized
// from the header).
inline LinkStatus recvFrame(Link& link, wire::MessageHeader* h, std::vector<uint8_t>* payload,
                            Deadline deadline) {
  RxFrame rx;
  const LinkStatus st = recvFrameWith(link, rx, deadline, [&](RxFrame& r) {
    payload->assign(wire::carriesPayload(r.header().kind) ? r.header().length : 0, 0);
    r.setTarget(payload->data());
  });
  if (st == LinkStatus::Progress) *h = rx.header();
  return st;
}

}  // namespace tccl::testing
