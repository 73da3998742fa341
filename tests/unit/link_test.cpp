// Links (transport/link.hpp): TxFrame / RxFrame over in-memory link pairs with random
// partial I/O (exact bytes, exact counters, end of file after a half close, peek),
// waitLinks, and the TCP link over a loopback connection.
#include "transport/link.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "link_testing.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"
#include "transport/tcp_link.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using testing::Message;
using testing::payloadOf;
using testing::recvFrame;
using testing::sendFrame;

// A mix of kinds and sizes: empty, tiny, around the header size, larger than any
// capacity used (up to maxLen); Rts and Abort carry none.
std::vector<Message> someMessages(uint64_t seed, size_t maxLen = 20000) {
  std::mt19937_64 rng(seed);
  std::vector<Message> ms;
  const size_t sizes[] = {0, 1, 23, 24, 25, 100, 4095, 20000};
  uint32_t step = 0;
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t len : sizes) {
      if (len > maxLen) continue;
      Message m;
      m.header.kind = (step % 5 == 3) ? wire::MsgKind::Eager : wire::MsgKind::Data;
      m.header.seq = static_cast<uint32_t>(rng());
      m.header.fingerprint = static_cast<uint32_t>(rng());
      m.header.step = step++;
      m.header.length = len;
      m.payload.resize(len);
      for (uint8_t& b : m.payload) b = static_cast<uint8_t>(rng());
      ms.push_back(std::move(m));
    }
    Message rts;
    rts.header.kind = wire::MsgKind::Rts;  // announces a size, carries nothing
    rts.header.step = step++;
    rts.header.length = 123456;
    ms.push_back(rts);
    Message abort;
    abort.header.kind = wire::MsgKind::Abort;
    abort.header.step = step++;
    ms.push_back(abort);
  }
  return ms;
}

// One direction: a sender thread and a receiver thread move `ms` over the pair.
// readAhead > 0: the receiver's frame reads ahead (RxFrame::enableReadAhead).
void exchange(Link& tx, Link& rx, const std::vector<Message>& ms, bool useExpect,
              size_t readAhead = 0) {
  const Deadline deadline = Deadline::after(20s);
  std::string sendError;
  std::thread sender([&] {
    for (const Message& m : ms) {
      if (sendFrame(tx, m.header, m.payload.data(), deadline) != LinkStatus::Progress) {
        sendError = "send failed at step " + std::to_string(m.header.step);
        return;
      }
      if (tx.txPartial) sendError = "txPartial set after a complete message";
    }
    tx.shutdownWrite();
  });
  RxFrame frame;
  if (readAhead > 0) frame.enableReadAhead(readAhead);
  [&] {
    size_t i = 0;
    for (const Message& m : ms) {
      SCOPED_TRACE("message " + std::to_string(i++));
      std::vector<uint8_t> got(m.payload.size() + 1, 0xEE);
      const size_t expect = useExpect ? payloadOf(m) : 0;
      ASSERT_EQ(recvFrame(rx, frame, got.data(), expect, deadline), LinkStatus::Progress);
      EXPECT_EQ(frame.header(), m.header);
      EXPECT_EQ(frame.got(), wire::kHeaderSize + payloadOf(m));
      EXPECT_EQ(frame.payloadGot(), payloadOf(m));
      EXPECT_EQ(got.back(), 0xEE) << "written past the payload";
      got.pop_back();
      if (payloadOf(m) > 0) {
        EXPECT_EQ(got, m.payload);
      }
    }
    // After the half close: end of file.
    std::vector<uint8_t> sink(16);
    EXPECT_EQ(recvFrame(rx, frame, sink.data(), 0, deadline), LinkStatus::Closed);
    EXPECT_EQ(rx.errorText(), "connection closed by the peer");
  }();
  sender.join();  // a receiver that stopped early lets it fail at its deadline
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(sendError, "");
  EXPECT_FALSE(tx.open());
  EXPECT_TRUE(rx.open());

  uint64_t payload = 0;
  for (const Message& m : ms) payload += payloadOf(m);
  const PeerCounters s = tx.counters().snapshot();
  const PeerCounters r = rx.counters().snapshot();
  EXPECT_EQ(s.payloadSent, payload);
  EXPECT_EQ(s.messagesSent, ms.size());
  EXPECT_EQ(s.wireSent, payload + wire::kHeaderSize * ms.size());
  EXPECT_EQ(s.payloadRecv + s.wireRecv + s.messagesRecv, 0u);
  EXPECT_EQ(r.payloadRecv, payload);
  EXPECT_EQ(r.messagesRecv, ms.size());
  EXPECT_EQ(r.wireRecv, payload + wire::kHeaderSize * ms.size());
  EXPECT_EQ(r.payloadSent + r.wireSent + r.messagesSent, 0u);
}

TEST(LinkFrames, ExactBytesAndCountersOverPartialIo) {
  for (uint64_t seed : {0u, 1u, 2u, 3u, 99u}) {
    for (size_t cap : {size_t{1}, size_t{7}, size_t{30}, size_t{1024}, size_t{64 * 1024}}) {
      for (bool useExpect : {true, false}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " capacity " + std::to_string(cap) +
                     (useExpect ? " expect" : " setTarget"));
        MemLinkPair p = makeMemLinkPair(3, 5, Lane::Collective, cap, seed);
        EXPECT_EQ(p.a->peer(), 5);
        EXPECT_EQ(p.b->peer(), 3);
        // A byte at a time is a wake-up per byte: keep those runs short.
        const std::vector<Message> ms = someMessages(seed + cap, cap < 100 ? 100 : 20000);
        exchange(*p.a, *p.b, ms, useExpect);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(LinkFrames, ReadAheadKeepsEveryFrameAndCounterExact) {
  for (uint64_t seed : {0u, 4u, 17u}) {
    for (size_t cap : {size_t{1}, size_t{30}, size_t{5000}, size_t{64 * 1024}}) {
      for (size_t ahead : {size_t{1}, size_t{24}, size_t{25}, size_t{8192}}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " capacity " + std::to_string(cap) +
                     " read-ahead " + std::to_string(ahead));
        MemLinkPair p = makeMemLinkPair(0, 1, Lane::P2P, cap, seed);
        const std::vector<Message> ms = someMessages(seed + cap + ahead, cap < 100 ? 100 : 20000);
        exchange(*p.a, *p.b, ms, false, ahead);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(LinkFrames, ReadAheadTakesSmallFramesInOneRead) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::P2P, 64 * 1024, 0);
  std::vector<Message> ms;
  size_t total = 0;
  for (uint32_t i = 0; i < 10; ++i) {
    Message m;
    m.header.kind = wire::MsgKind::Eager;
    m.header.step = i;
    m.header.length = 8 + i;
    m.payload.assign(8 + i, static_cast<uint8_t>(i * 7 + 1));
    total += wire::kHeaderSize + m.payload.size();
    ASSERT_EQ(sendFrame(*p.a, m.header, m.payload.data(), Deadline::after(5s)),
              LinkStatus::Progress);
    ms.push_back(std::move(m));
  }
  RxFrame rx;
  rx.enableReadAhead(4096);
  ASSERT_EQ(rx.pumpHeader(*p.b).status, LinkStatus::Progress);
  EXPECT_TRUE(rx.headerReady());
  EXPECT_EQ(rx.staged(), total - wire::kHeaderSize);  // the rest came with the first read
  // Not counted until a frame takes them.
  EXPECT_EQ(p.b->counters().snapshot().wireRecv, wire::kHeaderSize);
  EXPECT_EQ(rx.header(), ms[0].header);
  std::vector<uint8_t> first(ms[0].payload.size());
  rx.setTarget(first.data());
  ASSERT_EQ(rx.pumpPayload(*p.b).status, LinkStatus::Progress);
  EXPECT_TRUE(rx.done());
  EXPECT_EQ(first, ms[0].payload);
  for (size_t i = 1; i < ms.size(); ++i) {
    const Message& m = ms[i];
    std::vector<uint8_t> got(m.payload.size());
    ASSERT_EQ(recvFrame(*p.b, rx, got.data(), 0, Deadline::after(5s)), LinkStatus::Progress);
    EXPECT_EQ(rx.header(), m.header);
    EXPECT_EQ(got, m.payload);
  }
  EXPECT_EQ(rx.staged(), 0u);
  EXPECT_EQ(p.b->counters().snapshot().wireRecv, total);
  EXPECT_EQ(p.b->counters().snapshot().messagesRecv, ms.size());
  rx.reset();
  EXPECT_EQ(rx.pumpHeader(*p.b).status, LinkStatus::Blocked);
}

// One thread per end, as the executor uses a link: it sends `out` and receives `in`
// at once, pumping both directions and waiting for either when neither moved.
std::string duplex(Link& link, const std::vector<Message>& out, const std::vector<Message>& in) {
  const Deadline deadline = Deadline::after(20s);
  TxFrame tx;
  RxFrame rx;
  size_t si = 0, ri = 0;
  bool shut = false, eof = false;
  std::vector<uint8_t> got;
  while (!eof || si < out.size()) {
    bool progress = false, sendBlocked = false, recvBlocked = false;
    if (si < out.size()) {
      if (tx.idle()) tx.start(out[si].header, out[si].payload.data());
      const LinkIo io = tx.pump(link);
      if (io.status == LinkStatus::Blocked) sendBlocked = true;
      if (io.status == LinkStatus::Closed || io.status == LinkStatus::Error) return "send failed";
      if (io.status == LinkStatus::Progress) progress = true;
      if (tx.done()) {
        tx.reset();
        ++si;
      }
    }
    if (si == out.size() && !shut) {
      link.shutdownWrite();
      shut = true;
    }
    if (eof) {
      if (!progress) {
        std::vector<LinkWait> w = {{&link, false, sendBlocked, 0}};
        if (!waitLinks(w, -1, deadline)) return "deadline";
      }
      continue;
    }
    if (rx.got() == 0 && ri < in.size()) {
      got.assign(payloadOf(in[ri]), 0);
      rx.expect(got.data(), got.size());
    }
    const LinkIo io = !rx.headerReady() ? rx.pumpHeader(link) : rx.pumpPayload(link);
    if (io.status == LinkStatus::Blocked) recvBlocked = true;
    if (io.status == LinkStatus::Error) return "receive failed";
    if (io.status == LinkStatus::Closed) {
      if (ri < in.size() || rx.got() > 0) return "end of file before message " + std::to_string(ri);
      eof = true;
    }
    if (io.status == LinkStatus::Progress) progress = true;
    if (rx.done()) {
      if (ri >= in.size()) return "a message too many";
      if (!(rx.header() == in[ri].header)) return "header " + std::to_string(ri) + " differs";
      if (payloadOf(in[ri]) > 0 && got != in[ri].payload) {
        return "payload " + std::to_string(ri) + " differs";
      }
      rx.reset();
      ++ri;
    }
    if (!progress && !eof) {
      std::vector<LinkWait> w = {{&link, recvBlocked, sendBlocked, 0}};
      if (!waitLinks(w, -1, deadline)) {
        return "deadline: sent " + std::to_string(si) + ", received " + std::to_string(ri);
      }
    }
  }
  return si == out.size() ? "" : "not everything sent";
}

TEST(LinkFrames, BothDirectionsAtOnceFromOneThreadPerEnd) {
  for (uint64_t seed : {5u, 6u, 7u}) {
    for (size_t cap : {size_t{100}, size_t{5000}}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " capacity " + std::to_string(cap));
      MemLinkPair p = makeMemLinkPair(0, 1, Lane::P2P, cap, seed);
      EXPECT_EQ(p.a->lane(), Lane::P2P);
      const std::vector<Message> ab = someMessages(seed);
      const std::vector<Message> ba = someMessages(seed + 1000);
      std::string errB;
      std::thread other([&] { errB = duplex(*p.b, ba, ab); });
      EXPECT_EQ(duplex(*p.a, ab, ba), "");
      other.join();
      EXPECT_EQ(errB, "");
      uint64_t payload = 0;
      for (const Message& m : ab) payload += payloadOf(m);
      EXPECT_EQ(p.a->counters().snapshot().payloadSent, payload);
      EXPECT_EQ(p.b->counters().snapshot().payloadRecv, payload);
      EXPECT_EQ(p.b->counters().snapshot().messagesRecv, ab.size());
    }
  }
}

TEST(LinkFrames, OneTransferTakesHeaderAndPayloadWhenTheSizeIsKnown) {
  // Without partial I/O and with room, a message is one writev and one readv.
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 4096, 0);
  std::vector<uint8_t> payload(1000, 7);
  wire::MessageHeader h;
  h.length = payload.size();
  TxFrame tx;
  tx.start(h, payload.data());
  const LinkIo io = tx.pump(*p.a);
  EXPECT_EQ(io.status, LinkStatus::Progress);
  EXPECT_EQ(io.bytes, wire::kHeaderSize + payload.size());
  EXPECT_TRUE(tx.done());
  EXPECT_EQ(tx.sent(), tx.total());
  std::vector<uint8_t> got(payload.size());
  RxFrame rx;
  rx.expect(got.data(), got.size());
  const LinkIo in = rx.pumpHeader(*p.b);
  EXPECT_EQ(in.bytes, wire::kHeaderSize + payload.size());
  EXPECT_TRUE(rx.done());
  EXPECT_EQ(got, payload);
  EXPECT_EQ(p.b->counters().snapshot().messagesRecv, 1u);
}

TEST(LinkFrames, TxPartialWhileAMessageIsHalfSent) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 50, 0);
  std::vector<uint8_t> payload(100, 1);
  wire::MessageHeader h;
  h.length = payload.size();
  TxFrame tx;
  tx.start(h, payload.data());
  EXPECT_EQ(tx.pump(*p.a).bytes, 50u);
  EXPECT_TRUE(p.a->txPartial);
  EXPECT_EQ(tx.pump(*p.a).status, LinkStatus::Blocked);
  EXPECT_EQ(p.a->counters().snapshot().payloadSent, 26u);  // 50 bytes, 24 of them header
  EXPECT_EQ(p.a->counters().snapshot().messagesSent, 0u);
  std::vector<uint8_t> got(100);
  RxFrame rx;
  rx.expect(got.data(), got.size());
  EXPECT_EQ(rx.pumpHeader(*p.b).bytes, 50u);
  EXPECT_TRUE(rx.headerReady());
  EXPECT_FALSE(rx.done());
  EXPECT_EQ(tx.pump(*p.a).bytes, 50u);
  EXPECT_TRUE(p.a->txPartial);
  EXPECT_EQ(rx.pumpPayload(*p.b).bytes, 50u);
  EXPECT_EQ(tx.pump(*p.a).bytes, 24u);
  EXPECT_TRUE(tx.done());
  EXPECT_FALSE(p.a->txPartial);
  EXPECT_EQ(p.a->counters().snapshot().messagesSent, 1u);
  EXPECT_FALSE(rx.done());
  EXPECT_EQ(rx.pumpPayload(*p.b).bytes, 24u);
  EXPECT_TRUE(rx.done());
  EXPECT_EQ(got, payload);
}

// Frames of every shape for pumpMany: header-only kinds, empty, one-byte and larger
// payloads; frame i's payload byte j is (i * 37 + j) & 0xff.
struct FrameSet {
  std::vector<wire::MessageHeader> headers;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> stream;  // what the link must carry, in order
  uint64_t payloadBytes = 0;
};

FrameSet someFrames() {
  FrameSet s;
  const std::vector<std::pair<wire::MsgKind, size_t>> shapes = {
      {wire::MsgKind::Eager, 8},    {wire::MsgKind::Rts, 5000},  {wire::MsgKind::Eager, 0},
      {wire::MsgKind::Cts, 0},      {wire::MsgKind::Eager, 1},   {wire::MsgKind::Credit, 9},
      {wire::MsgKind::Eager, 1000}, {wire::MsgKind::Chunk, 333}, {wire::MsgKind::Eager, 3}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    wire::MessageHeader h;
    h.kind = shapes[i].first;
    h.length = shapes[i].second;
    h.step = static_cast<uint32_t>(i);
    const size_t carried = wire::carriesPayload(h.kind) ? shapes[i].second : 0;
    std::vector<uint8_t> payload(carried);
    for (size_t j = 0; j < carried; ++j) payload[j] = static_cast<uint8_t>((i * 37 + j) & 0xff);
    uint8_t enc[wire::kHeaderSize];
    wire::encodeHeader(h, enc);
    s.stream.insert(s.stream.end(), enc, enc + wire::kHeaderSize);
    s.stream.insert(s.stream.end(), payload.begin(), payload.end());
    s.payloadBytes += carried;
    s.headers.push_back(h);
    s.payloads.push_back(std::move(payload));
  }
  return s;
}

TEST(LinkFrames, ManyFramesShareOneWrite) {
  // With room, pumpMany hands every frame to the link in one writev and counts each.
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::P2P, 64 * 1024, 0);
  const FrameSet set = someFrames();
  std::vector<TxFrame> frames(set.headers.size());
  std::vector<TxFrame*> ptrs;
  for (size_t i = 0; i < frames.size(); ++i) {
    frames[i].start(set.headers[i], set.payloads[i].data());
    ptrs.push_back(&frames[i]);
  }
  const LinkIo io = TxFrame::pumpMany(*p.a, ptrs.data(), ptrs.size());
  EXPECT_EQ(io.status, LinkStatus::Progress);
  EXPECT_EQ(io.bytes, set.stream.size());
  for (const TxFrame& f : frames) EXPECT_TRUE(f.done());
  EXPECT_FALSE(p.a->txPartial);
  const PeerCounters c = p.a->counters().snapshot();
  EXPECT_EQ(c.messagesSent, frames.size());
  EXPECT_EQ(c.payloadSent, set.payloadBytes);
  EXPECT_EQ(c.wireSent, set.stream.size());
  std::vector<uint8_t> got(set.stream.size() + 1);
  iovec in{got.data(), got.size()};
  EXPECT_EQ(p.b->readv(&in, 1).bytes, set.stream.size());  // one write: all of it is there
  got.resize(set.stream.size());
  EXPECT_EQ(got, set.stream);
}

TEST(LinkFrames, ManyFramesCutAnywhere) {
  // A link that takes a few bytes at a time (random partial transfers, a small buffer):
  // pumpMany, called again from the first frame not yet out, carries the same bytes in
  // the same order; txPartial holds exactly while a frame is half out, and the counters
  // count each frame once it is out.
  const FrameSet set = someFrames();
  std::vector<size_t> ends;  // where each frame ends in the stream
  size_t at = 0;
  for (size_t i = 0; i < set.headers.size(); ++i) {
    at += wire::kHeaderSize + set.payloads[i].size();
    ends.push_back(at);
  }
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    MemLinkPair p = makeMemLinkPair(0, 1, Lane::P2P, 40 + seed * 13, seed);
    std::vector<TxFrame> frames(set.headers.size());
    for (size_t i = 0; i < frames.size(); ++i)
      frames[i].start(set.headers[i], set.payloads[i].data());
    std::vector<uint8_t> got;
    size_t first = 0, sent = 0;
    for (int round = 0; first < frames.size() && round < 100000; ++round) {
      std::vector<TxFrame*> ptrs;
      for (size_t i = first; i < frames.size(); ++i) ptrs.push_back(&frames[i]);
      const LinkIo io = TxFrame::pumpMany(*p.a, ptrs.data(), ptrs.size());
      ASSERT_NE(io.status, LinkStatus::Closed);
      ASSERT_NE(io.status, LinkStatus::Error);
      if (io.status == LinkStatus::Progress) sent += io.bytes;
      const bool atBoundary = sent == 0 || std::find(ends.begin(), ends.end(), sent) != ends.end();
      if (io.status == LinkStatus::Progress && io.bytes > 0) {
        EXPECT_EQ(p.a->txPartial, !atBoundary) << "seed " << seed << " at byte " << sent;
      }
      const size_t out =
          static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), sent) - ends.begin());
      EXPECT_EQ(p.a->counters().snapshot().messagesSent, out) << "seed " << seed;
      while (first < frames.size() && frames[first].done()) ++first;
      EXPECT_EQ(first, out) << "seed " << seed;
      std::vector<uint8_t> buf(4096);
      iovec in{buf.data(), buf.size()};
      const LinkIo r = p.b->readv(&in, 1);
      if (r.status == LinkStatus::Progress)
        got.insert(got.end(), buf.begin(), buf.begin() + r.bytes);
    }
    for (;;) {
      std::vector<uint8_t> buf(4096);
      iovec in{buf.data(), buf.size()};
      const LinkIo r = p.b->readv(&in, 1);
      if (r.status != LinkStatus::Progress) break;
      got.insert(got.end(), buf.begin(), buf.begin() + r.bytes);
    }
    EXPECT_EQ(got, set.stream) << "seed " << seed;
    const PeerCounters c = p.a->counters().snapshot();
    EXPECT_EQ(c.payloadSent, set.payloadBytes) << "seed " << seed;
    EXPECT_EQ(c.wireSent, set.stream.size()) << "seed " << seed;
    EXPECT_FALSE(p.a->txPartial);
  }
}

TEST(LinkPeek, SeesWithoutConsuming) {
  for (uint64_t seed : {0u, 1u, 2u, 3u, 4u}) {
    MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 1024, seed);
    uint8_t buf[wire::kHeaderSize];
    EXPECT_EQ(p.b->peek(buf, sizeof buf).status, LinkStatus::Blocked);
    wire::MessageHeader h;
    h.step = 42;
    h.length = 3;
    const uint8_t payload[3] = {1, 2, 3};
    ASSERT_EQ(sendFrame(*p.a, h, payload, Deadline::after(5s)), LinkStatus::Progress);
    uint8_t want[wire::kHeaderSize];
    wire::encodeHeader(h, want);
    const LinkIo io = p.b->peek(buf, sizeof buf);
    ASSERT_EQ(io.status, LinkStatus::Progress);
    ASSERT_GE(io.bytes, 1u);
    ASSERT_LE(io.bytes, wire::kHeaderSize);
    if (seed == 0) {
      EXPECT_EQ(io.bytes, wire::kHeaderSize);
    }
    EXPECT_EQ(std::memcmp(buf, want, io.bytes), 0);
    EXPECT_EQ(p.b->counters().snapshot().wireRecv, 0u) << "a peek counts nothing";
    // The whole message is still there.
    RxFrame rx;
    uint8_t got[3] = {};
    ASSERT_EQ(recvFrame(*p.b, rx, got, 3, Deadline::after(5s)), LinkStatus::Progress);
    EXPECT_EQ(rx.header(), h);
    EXPECT_EQ(std::memcmp(got, payload, 3), 0);
    // End of file shows in a peek too.
    p.a->shutdownWrite();
    EXPECT_EQ(p.b->peek(buf, sizeof buf).status, LinkStatus::Closed);
  }
}

TEST(MemLink, EndOfFileAfterTheQueuedDataAndClosedWritesOnceThePeerIsGone) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 64, 0);
  const uint8_t data[5] = {9, 8, 7, 6, 5};
  iovec out = {const_cast<uint8_t*>(data), sizeof data};
  EXPECT_EQ(p.a->writev(&out, 1).bytes, 5u);
  p.a->shutdownWrite();
  EXPECT_EQ(p.a->writev(&out, 1).status, LinkStatus::Closed) << "writes after the half close";
  uint8_t got[8] = {};
  iovec in = {got, sizeof got};
  const LinkIo io = p.b->readv(&in, 1);
  EXPECT_EQ(io.status, LinkStatus::Progress);
  EXPECT_EQ(io.bytes, 5u);
  EXPECT_EQ(p.b->readv(&in, 1).status, LinkStatus::Closed);
  // b can still write until a is destroyed.
  EXPECT_EQ(p.b->writev(&out, 1).status, LinkStatus::Progress);
  p.a.reset();
  EXPECT_EQ(p.b->writev(&out, 1).status, LinkStatus::Closed);
}

TEST(MemLink, FullQueueBlocksUntilTheReaderMakesRoom) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 10, 0);
  std::vector<uint8_t> data(25, 1);
  iovec out = {data.data(), data.size()};
  EXPECT_EQ(p.a->writev(&out, 1).bytes, 10u);
  EXPECT_EQ(p.a->writev(&out, 1).status, LinkStatus::Blocked);
  std::thread reader([&] {
    std::this_thread::sleep_for(20ms);
    uint8_t got[4];
    iovec in = {got, sizeof got};
    (void)p.b->readv(&in, 1);
  });
  std::vector<LinkWait> w = {{p.a.get(), false, true, 0}};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(waitLinks(w, -1, Deadline::after(5s)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 10ms);
  EXPECT_TRUE(w[0].stirred());
  reader.join();
  EXPECT_EQ(p.a->writev(&out, 1).bytes, 4u);
}

TEST(WaitLinks, DeadlineAndWakeDescriptor) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 10, 0);
  std::vector<LinkWait> w = {{p.a.get(), true, false, 0}};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(waitLinks(w, -1, Deadline::after(30ms)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 29ms);
  EXPECT_EQ(w[0].revents, 0);

  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  const uint64_t one = 1;
  ASSERT_EQ(::write(wake.get(), &one, sizeof one), 8);
  bool woken = false;
  EXPECT_TRUE(waitLinks(w, wake.get(), Deadline::after(5s), &woken));
  EXPECT_TRUE(woken);
  EXPECT_FALSE(w[0].stirred());
}

// pollLinks looks once and returns at once: nothing ready is false with every revents
// cleared (a stale one from the last look included), data on one link is true with only
// that link stirred, and a wake descriptor sets *woken. A wake descriptor < 0 is ignored.
TEST(WaitLinks, PollLinksLooksOnceWithoutWaiting) {
  MemLinkPair p = makeMemLinkPair(0, 1, Lane::Collective, 64, 0);
  MemLinkPair q = makeMemLinkPair(0, 2, Lane::Collective, 64, 0);
  std::vector<LinkWait> w = {{p.a.get(), true, false, POLLIN}, {q.a.get(), true, false, 0}};
  bool woken = true;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(pollLinks(w, {-1}, &woken));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_FALSE(woken);
  EXPECT_EQ(w[0].revents, 0);
  EXPECT_EQ(w[1].revents, 0);

  uint8_t byte = 7;
  iovec out = {&byte, 1};
  ASSERT_EQ(q.b->writev(&out, 1).bytes, 1u);
  EXPECT_TRUE(pollLinks(w, {-1}, &woken));
  EXPECT_FALSE(woken);
  EXPECT_FALSE(w[0].stirred());
  EXPECT_TRUE(w[1].stirred());

  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  const uint64_t one = 1;
  ASSERT_EQ(::write(wake.get(), &one, sizeof one), 8);
  std::vector<LinkWait> none = {{p.a.get(), true, false, 0}};
  EXPECT_TRUE(pollLinks(none, {-1, wake.get()}, &woken));
  EXPECT_TRUE(woken);
  EXPECT_FALSE(none[0].stirred());
}

// ---- the TCP link -----------------------------------------------------------------------

struct TcpPair {
  std::unique_ptr<Link> a, b;
};

TcpPair tcpPair() {
  net::Fd listener = net::listenOn("127.0.0.1", 0);
  const uint16_t port = net::localAddress(listener.get()).port();
  net::Fd dialled = net::connectWithRetry("127.0.0.1", port, Deadline::after(5s));
  net::Fd accepted;
  for (int i = 0; i < 500 && !accepted.valid(); ++i) {
    accepted = net::acceptNonBlocking(listener.get());
    if (!accepted.valid()) std::this_thread::sleep_for(2ms);
  }
  if (!accepted.valid()) throwError(ErrorKind::System, "accept timed out");
  net::setNonBlocking(accepted.get());
  TcpPair p;
  p.a = std::make_unique<TcpLink>(1, Lane::Collective, "peer-b", std::move(dialled));
  p.b = std::make_unique<TcpLink>(0, Lane::Collective, "peer-a", std::move(accepted));
  return p;
}

TEST(TcpLink, FramesPeekAndEndOfFile) {
  TcpPair p = tcpPair();
  EXPECT_EQ(p.a->address(), "peer-b");
  EXPECT_EQ(p.a->pollEvents(true, true), POLLIN | POLLOUT);
  EXPECT_EQ(p.a->pollEvents(false, false), 0);
  exchange(*p.a, *p.b, someMessages(11), true);
}

TEST(TcpLink, ResetIsClosedAndSaysSo) {
  TcpPair p = tcpPair();
  uint8_t buf[4];
  EXPECT_EQ(p.b->peek(buf, sizeof buf).status, LinkStatus::Blocked);
  // Unread input at close makes the kernel send a reset.
  const uint8_t data[4] = {1, 2, 3, 4};
  iovec out = {const_cast<uint8_t*>(data), sizeof data};
  ASSERT_EQ(p.b->writev(&out, 1).status, LinkStatus::Progress);
  std::this_thread::sleep_for(20ms);
  p.a.reset();
  std::vector<LinkWait> w = {{p.b.get(), true, false, 0}};
  ASSERT_TRUE(waitLinks(w, -1, Deadline::after(5s)));
  iovec in = {buf, sizeof buf};
  const LinkIo io = p.b->readv(&in, 1);
  EXPECT_EQ(io.status, LinkStatus::Closed);
  EXPECT_EQ(p.b->errorText(), "connection reset by the peer");
  // Writing to a reset connection: closed too (EPIPE), never SIGPIPE.
  EXPECT_EQ(p.b->writev(&out, 1).status, LinkStatus::Closed);
}

}  // namespace
}  // namespace tccl
