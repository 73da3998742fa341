// Several sockets per peer (transport/striped_link.hpp, docs/nsocks.md): the split rule
// (planStripes, stripesMessage) against a brute-force count, and StripedLink pairs over
// K in-memory links with random partial reads and writes: exact bytes, exact counters,
// the bytes every socket carried, the header's flag hidden from the user, peek, end of
// file, and a threshold the receiver does not share. Then one pair over real sockets.
#include "transport/striped_link.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "link_testing.hpp"
#include "net/socket.hpp"
#include "transport/tcp_link.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using testing::ForwardingLink;
using testing::Message;
using testing::payloadOf;
using testing::recvFrame;
using testing::sendFrame;

// ---- the split rule ---------------------------------------------------------------------

TEST(StripePlan, EveryByteOnExactlyOneStripeInChunksOfTheRule) {
  for (int k : {1, 2, 3, 4, 7, 16}) {
    const uint64_t ku = static_cast<uint64_t>(k);
    const uint64_t big = kStripeChunkMax * ku;
    for (uint64_t len : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{4097},
                         ku * 1000 + 3, ku * 65536, ku * 65536 + ku - 1, big - 1, big, big + 1,
                         3 * big + 12345, uint64_t{64} << 20}) {
      SCOPED_TRACE("K=" + std::to_string(k) + " L=" + std::to_string(len));
      const StripePlan p = planStripes(len, k);
      if (len == 0) {
        EXPECT_EQ(p.chunk, 0u);
        for (int s = 0; s < k; ++s) EXPECT_EQ(p.bytesOn(s), 0u);
        continue;
      }
      // c = min(ceil(L / K), kStripeChunkMax), from the formula's own terms.
      EXPECT_EQ(p.chunk, std::min((len + ku - 1) / ku, kStripeChunkMax));
      // Walk the payload chunk by chunk: chunk j on stripe j mod K, each chunk whole.
      std::vector<uint64_t> on(ku, 0);
      uint64_t covered = 0, j = 0;
      for (uint64_t off = 0; off < len; ++j) {
        const uint64_t end = p.chunkEnd(off);
        ASSERT_GT(end, off);
        ASSERT_LE(end - off, kStripeChunkMax);
        EXPECT_EQ(p.stripeAt(off), static_cast<int>(j % ku));
        EXPECT_EQ(p.stripeAt(end - 1), p.stripeAt(off)) << "a chunk on one stripe";
        if (end < len) {
          EXPECT_EQ(end - off, p.chunk) << "only the last chunk is short";
        }
        on[j % ku] += end - off;
        covered += end - off;
        off = end;
      }
      EXPECT_EQ(covered, len);
      for (int s = 0; s < k; ++s) EXPECT_EQ(p.bytesOn(s), on[static_cast<size_t>(s)]) << s;
      // Up to K chunks of at most kStripeChunkMax: one contiguous part per stripe, and the
      // stripes within one chunk of one another.
      if (len <= big) {
        EXPECT_LE(j, ku);
      }
      for (int s = 0; s < k; ++s) EXPECT_LE(on[0] - on[static_cast<size_t>(s)], p.chunk);
    }
  }
}

TEST(StripePlan, SenderStripesDataFromItsThresholdAndNeverBelowTheFloor) {
  wire::MessageHeader h;
  h.kind = wire::MsgKind::Data;
  const uint64_t t = 100000;
  for (uint64_t len : {uint64_t{0}, uint64_t{1}, t - 1, t, t + 1, uint64_t{1} << 30}) {
    h.length = len;
    EXPECT_EQ(stripesMessage(h, 4, t), len >= t) << len;
    EXPECT_FALSE(stripesMessage(h, 1, t)) << "one socket never stripes";
    EXPECT_FALSE(stripesMessage(h, 4, UINT64_MAX));
  }
  // A threshold below the floor is the floor.
  for (uint64_t len : {kStripeFloorBytes - 1, kStripeFloorBytes}) {
    h.length = len;
    EXPECT_EQ(stripesMessage(h, 2, 1), len >= kStripeFloorBytes) << len;
  }
  // Only data messages: an abort, or a p2p kind, stays whole on stripe 0.
  h.length = 1 << 20;
  for (wire::MsgKind k :
       {wire::MsgKind::Abort, wire::MsgKind::Eager, wire::MsgKind::Rts, wire::MsgKind::Chunk}) {
    h.kind = k;
    EXPECT_FALSE(stripesMessage(h, 4, 1));
  }
}

// ---- StripedLink over in-memory links --------------------------------------------------

// Forwards to an in-memory link and counts the bytes that crossed it.
class CountingLink final : public ForwardingLink {
 public:
  CountingLink(std::unique_ptr<Link> inner, std::atomic<uint64_t>* sent,
               std::atomic<uint64_t>* recv)
      : ForwardingLink(std::move(inner)), sent_(sent), recv_(recv) {}
  LinkIo writev(const iovec* iov, int n) override {
    const LinkIo io = ForwardingLink::writev(iov, n);
    if (io.status == LinkStatus::Progress) *sent_ += io.bytes;
    return io;
  }
  LinkIo readv(const iovec* iov, int n) override {
    const LinkIo io = ForwardingLink::readv(iov, n);
    if (io.status == LinkStatus::Progress) *recv_ += io.bytes;
    return io;
  }

 private:
  std::atomic<uint64_t>* sent_;
  std::atomic<uint64_t>* recv_;
};

struct StripedPair {
  std::unique_ptr<StripedLink> a, b;                // a: rank 0's end, b: rank 1's
  std::vector<std::atomic<uint64_t>> aSent, bRecv;  // per stripe, a -> b
  std::vector<std::atomic<uint64_t>> aRecv, bSent;
};

std::unique_ptr<StripedPair> makeStripedPair(int k, size_t capacity, uint64_t seed,
                                             uint64_t aMinBytes, uint64_t bMinBytes) {
  auto p = std::make_unique<StripedPair>();
  p->aSent = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(k));
  p->bRecv = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(k));
  p->aRecv = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(k));
  p->bSent = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(k));
  std::vector<std::unique_ptr<Link>> as, bs;
  for (int s = 0; s < k; ++s) {
    const size_t i = static_cast<size_t>(s);
    MemLinkPair m = makeMemLinkPair(0, 1, Lane::Collective, capacity, seed ? seed * 31 + i : 0);
    as.push_back(std::make_unique<CountingLink>(std::move(m.a), &p->aSent[i], &p->aRecv[i]));
    bs.push_back(std::make_unique<CountingLink>(std::move(m.b), &p->bSent[i], &p->bRecv[i]));
  }
  p->a = std::make_unique<StripedLink>(1, Lane::Collective, "mem", std::move(as), aMinBytes);
  p->b = std::make_unique<StripedLink>(0, Lane::Collective, "mem", std::move(bs), bMinBytes);
  return p;
}

// The sizes of the grid around threshold t for K sockets, each with data that depends
// on the message and the byte's index (a byte from the wrong stripe or offset shows).
std::vector<Message> gridMessages(int k, uint64_t t, uint64_t maxLen) {
  const uint64_t ku = static_cast<uint64_t>(k);
  std::vector<uint64_t> sizes = {
      0, 1, 23, 24, t - 1, t, t + 1, ku * 5000 + 3, 1 << 20, (1 << 20) + 3, 3 << 20};
  std::vector<Message> ms;
  uint32_t step = 0;
  for (uint64_t len : sizes) {
    if (len > maxLen) continue;
    Message m;
    m.header.kind = wire::MsgKind::Data;
    m.header.seq = 7;
    m.header.fingerprint = 0xC0FFEE;
    m.header.step = step;
    m.header.length = len;
    m.payload.resize(len);
    for (uint64_t i = 0; i < len; ++i) {
      m.payload[i] = static_cast<uint8_t>((i * 131 + (i >> 8) * 7 + step * 29) & 0xFF);
    }
    ms.push_back(std::move(m));
    ++step;
    if (step % 4 == 1) {  // an abort-shaped header between them: no payload, stripe 0
      Message a;
      a.header.kind = wire::MsgKind::Abort;
      a.header.step = step++;
      ms.push_back(a);
    }
  }
  return ms;
}

// a -> b: every message arrives exactly, and the counters and each socket's bytes are
// what the split rule says.
void exchange(StripedPair& p, const std::vector<Message>& ms, uint64_t senderMin, bool useExpect) {
  const int k = p.a->stripeCount();
  const Deadline deadline = Deadline::after(30s);
  std::string sendError;
  std::thread sender([&] {
    for (const Message& m : ms) {
      if (sendFrame(*p.a, m.header, m.payload.data(), deadline) != LinkStatus::Progress) {
        sendError =
            "send failed at step " + std::to_string(m.header.step) + ": " + p.a->errorText();
        return;
      }
    }
    p.a->shutdownWrite();
  });
  RxFrame frame;
  [&] {
    for (size_t i = 0; i < ms.size(); ++i) {
      const Message& m = ms[i];
      SCOPED_TRACE("message " + std::to_string(i) + " of " + std::to_string(m.payload.size()) +
                   " bytes");
      std::vector<uint8_t> got(m.payload.size() + 1, 0xEE);
      const size_t expect = useExpect ? payloadOf(m) : 0;
      ASSERT_EQ(recvFrame(*p.b, frame, got.data(), expect, deadline), LinkStatus::Progress)
          << p.b->errorText();
      EXPECT_EQ(frame.header(), m.header) << "the header as written (no striped flag)";
      EXPECT_EQ(got.back(), 0xEE) << "written past the payload";
      got.pop_back();
      if (payloadOf(m) == 0) continue;
      for (size_t j = 0; j < got.size(); ++j) {
        if (got[j] != m.payload[j]) {
          FAIL() << "first wrong byte at index " << j << ": got " << int(got[j]) << ", expected "
                 << int(m.payload[j]);
        }
      }
    }
    std::vector<uint8_t> sink(16);
    EXPECT_EQ(recvFrame(*p.b, frame, sink.data(), 0, deadline), LinkStatus::Closed);
    EXPECT_NE(p.b->errorText().find("connection closed by the peer"), std::string::npos)
        << p.b->errorText();
  }();
  sender.join();
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(sendError, "");

  // The link's counters: payload and wire bytes over all its sockets, exactly.
  uint64_t payload = 0;
  std::vector<uint64_t> perStripe(static_cast<size_t>(k), 0);
  for (const Message& m : ms) {
    payload += payloadOf(m);
    perStripe[0] += wire::kHeaderSize;
    if (stripesMessage(m.header, k, senderMin)) {
      const StripePlan plan = planStripes(m.header.length, k);
      for (int s = 0; s < k; ++s) perStripe[static_cast<size_t>(s)] += plan.bytesOn(s);
    } else {
      perStripe[0] += payloadOf(m);
    }
  }
  const PeerCounters s = p.a->counters().snapshot();
  const PeerCounters r = p.b->counters().snapshot();
  EXPECT_EQ(s.payloadSent, payload);
  EXPECT_EQ(s.messagesSent, ms.size());
  EXPECT_EQ(s.wireSent, payload + wire::kHeaderSize * ms.size());
  EXPECT_EQ(r.payloadRecv, payload);
  EXPECT_EQ(r.messagesRecv, ms.size());
  EXPECT_EQ(r.wireRecv, payload + wire::kHeaderSize * ms.size());
  uint64_t onSockets = 0;
  for (int i = 0; i < k; ++i) {
    const size_t si = static_cast<size_t>(i);
    EXPECT_EQ(p.aSent[si].load(), perStripe[si]) << "bytes sent on socket " << i;
    EXPECT_EQ(p.bRecv[si].load(), perStripe[si]) << "bytes read from socket " << i;
    onSockets += p.aSent[si].load();
  }
  EXPECT_EQ(onSockets, s.wireSent) << "the counters count every socket's bytes, no more";
}

TEST(StripedLink, ExactBytesCountersAndSocketsOverRandomPartialIo) {
  for (int k : {2, 3, 4}) {
    for (uint64_t seed : {0u, 1u, 7u}) {
      for (size_t cap : {size_t{777}, size_t{64 * 1024}, size_t{4 << 20}}) {
        for (bool useExpect : {true, false}) {
          const uint64_t t = 10000;
          SCOPED_TRACE("K=" + std::to_string(k) + " seed " + std::to_string(seed) + " capacity " +
                       std::to_string(cap) + (useExpect ? " expect" : ""));
          auto p = makeStripedPair(k, cap, seed, t, UINT64_MAX);
          // Small capacities are a wake-up per few bytes: keep their messages smaller.
          exchange(*p, gridMessages(k, t, cap < 4096 ? 200000 : 4 << 20), t, useExpect);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(StripedLink, SixteenSocketsAndTheFloorAsThreshold) {
  auto p = makeStripedPair(16, 64 * 1024, 5, 1, 1);
  exchange(*p, gridMessages(16, kStripeFloorBytes, 4 << 20), 1, true);
}

TEST(StripedLink, NeverStripingKeepsEverythingOnSocketZero) {
  auto p = makeStripedPair(4, 64 * 1024, 3, UINT64_MAX, UINT64_MAX);
  exchange(*p, gridMessages(4, 10000, 4 << 20), UINT64_MAX, true);
  for (size_t s = 1; s < 4; ++s) EXPECT_EQ(p->aSent[s].load(), 0u);
}

TEST(StripedLink, PeekShowsTheHeaderAsWritten) {
  auto p = makeStripedPair(4, 1 << 20, 0, 4096, 4096);
  std::vector<uint8_t> data(100000, 0x5A);
  wire::MessageHeader h;
  h.seq = 3;
  h.step = 9;
  h.length = data.size();
  ASSERT_EQ(sendFrame(*p->a, h, data.data(), Deadline::after(5s)), LinkStatus::Progress);
  uint8_t buf[wire::kHeaderSize];
  const LinkIo io = p->b->peek(buf, sizeof buf);
  ASSERT_EQ(io.status, LinkStatus::Progress);
  ASSERT_EQ(io.bytes, wire::kHeaderSize);
  wire::MessageHeader seen;
  ASSERT_EQ(wire::decodeHeader(buf, &seen), wire::DecodeStatus::Ok);
  EXPECT_EQ(seen, h);
  EXPECT_GT(p->aSent[3].load(), 0u) << "the message was striped";
  RxFrame rx;
  std::vector<uint8_t> got(data.size());
  ASSERT_EQ(recvFrame(*p->b, rx, got.data(), got.size(), Deadline::after(5s)),
            LinkStatus::Progress);
  EXPECT_EQ(got, data);
  EXPECT_EQ(p->b->peek(buf, sizeof buf).status, LinkStatus::Blocked);
}

// A reader offered room for another length than the message's: its check of the header
// fails, and the link refuses to go on rather than hand out misplaced bytes.
TEST(StripedLink, AMessageOfAnotherLengthStopsTheReader) {
  auto p = makeStripedPair(4, 1 << 20, 0, 4096, 4096);
  std::vector<uint8_t> data(20000, 1);
  wire::MessageHeader h;
  h.length = data.size();
  ASSERT_EQ(sendFrame(*p->a, h, data.data(), Deadline::after(5s)), LinkStatus::Progress);
  ASSERT_EQ(sendFrame(*p->a, h, data.data(), Deadline::after(5s)), LinkStatus::Progress);
  RxFrame rx;
  std::vector<uint8_t> got(40000);
  rx.expect(got.data(), got.size());  // expects 40000, 20000 come
  LinkIo io{};
  for (int i = 0; i < 100 && !rx.headerReady(); ++i) io = rx.pumpHeader(*p->b);
  ASSERT_TRUE(rx.headerReady());
  EXPECT_EQ(rx.header().length, 20000u);  // what the executor's checkHeader refuses
  for (int i = 0; i < 10 && io.status == LinkStatus::Progress; ++i) io = rx.pumpPayload(*p->b);
  EXPECT_EQ(io.status, LinkStatus::Error);
  EXPECT_NE(p->b->errorText().find("than expected"), std::string::npos) << p->b->errorText();
}

// ---- over real sockets ------------------------------------------------------------------

TEST(StripedLink, OverSocketPairsBothWaysAtOnce) {
  constexpr int k = 4;
  std::vector<std::unique_ptr<Link>> as, bs;
  for (int s = 0; s < k; ++s) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    as.push_back(std::make_unique<TcpLink>(1, Lane::Collective, "a", net::Fd(fds[0])));
    bs.push_back(std::make_unique<TcpLink>(0, Lane::Collective, "b", net::Fd(fds[1])));
  }
  StripedLink a(1, Lane::Collective, "a", std::move(as), 8192);
  StripedLink b(0, Lane::Collective, "b", std::move(bs), 8192);
  const std::vector<Message> ms = gridMessages(k, 8192, 8 << 20);
  const Deadline deadline = Deadline::after(30s);
  // Each side sends the grid and receives the other's, at once (both directions of every
  // socket busy, as in a ring step), from one thread as the executor does (a link is used by
  // one thread at a time): a TxFrame and an RxFrame pumped in turn, waiting on the link for
  // whichever direction is blocked.
  auto run = [&](StripedLink& me, std::string& error) {
    size_t sent = 0, got = 0;
    TxFrame tx;
    RxFrame rx;
    std::vector<uint8_t> in;
    bool rxStarted = false;
    while ((sent < ms.size() || got < ms.size()) && error.empty()) {
      bool progress = false, wantRead = false, wantWrite = false;
      if (sent < ms.size()) {
        if (tx.idle()) tx.start(ms[sent].header, ms[sent].payload.data());
        const LinkIo io = tx.pump(me);
        if (io.status == LinkStatus::Progress) {
          progress = true;
          if (tx.done()) {
            tx.reset();
            ++sent;
          }
        } else if (io.status == LinkStatus::Blocked) {
          wantWrite = true;
        } else {
          error = "send failed: " + me.errorText();
        }
      }
      if (got < ms.size() && error.empty()) {
        const Message& m = ms[got];
        if (!rxStarted) {
          rx.reset();
          in.assign(m.payload.size(), 0);
          if (payloadOf(m) > 0) rx.expect(in.data(), payloadOf(m));
          rxStarted = true;
        }
        const bool inHeader = !rx.headerReady();
        const LinkIo io = inHeader ? rx.pumpHeader(me) : rx.pumpPayload(me);
        if (io.status == LinkStatus::Progress) {
          progress = true;
          if (rx.done()) {
            if (rx.header() != m.header || (payloadOf(m) > 0 && in != m.payload)) {
              error = "message " + std::to_string(m.header.step) + " differs";
            }
            rxStarted = false;
            ++got;
          }
        } else if (io.status == LinkStatus::Blocked) {
          wantRead = true;
        } else {
          error = "receive failed: " + me.errorText();
        }
      }
      if (progress || !error.empty()) continue;
      std::vector<LinkWait> w = {{&me, wantRead, wantWrite, 0}};
      if (!waitLinks(w, -1, deadline)) error = "timed out";
    }
  };
  std::string errA, errB;
  std::thread ta([&] { run(a, errA); });
  run(b, errB);
  ta.join();
  EXPECT_EQ(errA, "");
  EXPECT_EQ(errB, "");
  uint64_t payload = 0;
  for (const Message& m : ms) payload += payloadOf(m);
  EXPECT_EQ(a.counters().snapshot().payloadRecv, payload);
  EXPECT_EQ(b.counters().snapshot().payloadSent, payload);
  EXPECT_EQ(a.counters().snapshot().wireSent, payload + wire::kHeaderSize * ms.size());
}

}  // namespace
}  // namespace tccl
