// What the link tests share (link_test.cpp, striped_link_test.cpp): one framed message sent
// or received whole over a nonblocking link, waiting for readiness with waitLinks.
#pragma once

#include <vector>

#include "transport/link.hpp"

namespace tccl::testing {

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

// Receives one message into `target` (which must hold `expectLength` bytes, or the
// header's length when expectLength is 0: the target is then set after the header).
inline LinkStatus recvFrame(Link& link, RxFrame& rx, uint8_t* target, size_t expectLength,
                            Deadline deadline) {
  rx.reset();
  if (expectLength > 0) rx.expect(target, expectLength);
  for (;;) {
    const bool inHeader = !rx.headerReady();
    const LinkIo io = inHeader ? rx.pumpHeader(link) : rx.pumpPayload(link);
    if (io.status == LinkStatus::Progress) {
      if (inHeader && rx.headerReady()) {
        if (rx.decodeStatus() != wire::DecodeStatus::Ok) return LinkStatus::Error;
        if (expectLength == 0) rx.setTarget(target);
      }
      if (rx.done()) return LinkStatus::Progress;
      continue;
    }
    if (io.status != LinkStatus::Blocked) return io.status;
    std::vector<LinkWait> w = {{&link, true, false, 0}};
    if (!waitLinks(w, -1, deadline)) return LinkStatus::Blocked;
  }
}

}  // namespace tccl::testing
