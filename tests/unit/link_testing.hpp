// What the link tests share (link_test.cpp, striped_link_test.cpp, transport_test.cpp): a
// framed message, and one sent or received whole over a nonblocking link, waiting for
// readiness with waitLinks.
#pragma once

#include <cstdint>
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
