// The point-to-point engine over in-memory links: every rank is a thread with its own
// engine, joined to every other rank by a MemLinkPair with small buffers and random
// partial transfers, so that sends block, frames arrive in pieces and the order in
// which links become ready varies with the seed.
#include "exec/p2p.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "link_testing.hpp"
#include "transport/link.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;

class MemSource final : public P2PLinkSource {
 public:
  Link* link(int peer) override {
    auto it = links_.find(peer);
    return it == links_.end() ? nullptr : it->second.get();
  }
  void service() override {}
  std::vector<Link*> links() override {
    std::vector<Link*> out;
    for (auto& [p, l] : links_) out.push_back(l.get());
    return out;
  }
  int serviceFd() override { return -1; }
  std::string describePeer(int peer) override {
    return "test peer " + std::to_string(peer) + " is alive";
  }
  std::map<int, std::unique_ptr<Link>> links_;
};

struct World {
  World(int n, uint64_t seed, size_t capacity, P2PConfig base = {}) : sources(n) {
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        MemLinkPair p = makeMemLinkPair(a, b, Lane::P2P, capacity, seed ? seed + a * 131 + b : 0);
        sources[a].links_[b] = std::move(p.a);
        sources[b].links_[a] = std::move(p.b);
      }
    }
    for (int r = 0; r < n; ++r) {
      P2PConfig c = base;
      c.rank = r;
      c.worldSize = n;
      engines.push_back(std::make_unique<P2PEngine>(c, sources[r]));
    }
  }
  // Runs body(rank) on one thread per rank; fails the test on any exception.
  void run(const std::function<void(int)>& body) {
    std::vector<std::thread> ts;
    std::vector<std::string> errors(engines.size());
    for (size_t r = 0; r < engines.size(); ++r) {
      ts.emplace_back([&, r] {
        try {
          body(static_cast<int>(r));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : ts) t.join();
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
  std::vector<MemSource> sources;
  std::vector<std::unique_ptr<P2PEngine>> engines;
};

Deadline soon(std::chrono::milliseconds t = 20s) { return Deadline::after(t); }

// Byte i of the message rank `from` sends to rank `to` with tag `tag`.
uint8_t pattern(int from, int to, int tag, size_t i) {
  return static_cast<uint8_t>((i * 131u) ^ (static_cast<unsigned>(from) * 17u) ^
                              (static_cast<unsigned>(to) * 5u) ^ (static_cast<unsigned>(tag) * 3u) ^
                              (i >> 8));
}

std::vector<uint8_t> message(int from, int to, int tag, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(from, to, tag, i);
  return v;
}

// The first index where got differs from what `from` sent `to`, or -1.
int64_t firstWrong(const std::vector<uint8_t>& got, int from, int to, int tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != pattern(from, to, tag, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

struct GridCase {
  int world;
  size_t bytes;
};

// CTest's name for a case ends with gtest's print of its parameter: without this, its bytes,
// padding included, which change from run to run.
void PrintTo(const GridCase& c, std::ostream* os) {
  *os << "world " << c.world << ", " << c.bytes << " bytes";
}

class PairwiseExchange : public ::testing::TestWithParam<GridCase> {};

// Everyone posts a send to the right and a receive from the left, then waits: the
// pattern that deadlocks when sends wait for receives.
TEST_P(PairwiseExchange, CompletesWithExactData) {
  const auto [n, bytes] = GetParam();
  for (uint64_t seed : {0u, 7u}) {
    P2PConfig cfg;
    cfg.chunkBytes = 96 * 1024;  // several chunks for the rendezvous sizes
    World w(n, seed, 48 * 1024, cfg);
    w.run([&](int r) {
      const int right = (r + 1) % n, left = (r + n - 1) % n;
      auto out = message(r, right, 3, bytes);
      std::vector<uint8_t> in(bytes, 0xEE);
      auto s = P2PEngine::makeSend(out.data(), bytes, right, 3, soon(), 20000);
      auto v = P2PEngine::makeRecv(in.data(), bytes, left, 3, soon(), 20000);
      w.engines[r]->post({s, v});
      w.engines[r]->waitAll({s, v});
      EXPECT_EQ(firstWrong(in, left, r, 3), -1) << "rank " << r << " seed " << seed;
      EXPECT_EQ(v->result().source, left);
      EXPECT_EQ(v->result().tag, 3);
      EXPECT_EQ(v->result().bytes, bytes);
      EXPECT_EQ(s->result().stats.traffic.total().payloadSent, bytes);
      EXPECT_EQ(v->result().stats.traffic.total().payloadRecv, bytes);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, PairwiseExchange,
                         ::testing::Values(GridCase{2, 0}, GridCase{2, 1}, GridCase{2, 65536},
                                           GridCase{2, 65537}, GridCase{3, 1000000}, GridCase{4, 1},
                                           GridCase{5, 200000}, GridCase{8, 0}, GridCase{8, 4096},
                                           GridCase{7, 300001}),
                         [](const ::testing::TestParamInfo<GridCase>& c) {
                           return "world" + std::to_string(c.param.world) + "_bytes" +
                                  std::to_string(c.param.bytes);
                         });

TEST(P2P, TagsMatchIndependently) {
  World w(2, 3, 16 * 1024);
  w.run([&](int r) {
    auto& e = *w.engines[r];
    if (r == 0) {
      auto a = message(0, 1, 1, 5000), b = message(0, 1, 2, 300000);
      auto sa = P2PEngine::makeSend(a.data(), a.size(), 1, 1, soon(), 20000);
      auto sb = P2PEngine::makeSend(b.data(), b.size(), 1, 2, soon(), 20000);
      e.post({sa, sb});
      e.waitAll({sa, sb});
    } else {
      std::vector<uint8_t> got2(300000), got1(5000);
      auto r2 = P2PEngine::makeRecv(got2.data(), got2.size(), 0, 2, soon(), 20000);
      e.post(r2);
      e.wait(r2);  // tag 2 first, though tag 1 was sent first
      auto r1 = P2PEngine::makeRecv(got1.data(), got1.size(), 0, 1, soon(), 20000);
      e.post(r1);
      e.wait(r1);
      EXPECT_EQ(firstWrong(got2, 0, 1, 2), -1);
      EXPECT_EQ(firstWrong(got1, 0, 1, 1), -1);
    }
  });
}

TEST(P2P, SameTagIsNonOvertaking) {
  // Small and large messages mixed on one tag: eager ones must not pass rendezvous ones.
  const std::vector<size_t> sizes = {8, 200000, 0, 70000, 1, 64 * 1024, 500000, 3};
  World w(2, 11, 8 * 1024);
  w.run([&](int r) {
    auto& e = *w.engines[r];
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<P2PHandle> ops;
    for (size_t i = 0; i < sizes.size(); ++i) {
      // The tag of every message is 9; the content encodes its index.
      if (r == 0) {
        bufs.push_back(message(0, 1, static_cast<int>(i), sizes[i]));
        ops.push_back(P2PEngine::makeSend(bufs.back().data(), sizes[i], 1, 9, soon(), 20000));
      } else {
        bufs.emplace_back(sizes[i]);
      }
    }
    if (r == 1) {
      for (size_t i = 0; i < sizes.size(); ++i)
        ops.push_back(P2PEngine::makeRecv(bufs[i].data(), sizes[i], 0, 9, soon(), 20000));
    }
    e.post(ops);
    e.waitAll(ops);
    if (r == 1) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(ops[i]->result().bytes, sizes[i]) << i;
        EXPECT_EQ(firstWrong(bufs[i], 0, 1, static_cast<int>(i)), -1) << "message " << i;
      }
    }
  });
}

TEST(P2P, AnySourceNamesTheSender) {
  for (size_t bytes : {size_t{16}, size_t{150000}}) {
    const int n = 5;
    World w(n, 5, 32 * 1024);
    w.run([&](int r) {
      auto& e = *w.engines[r];
      if (r != 0) {
        auto out = message(r, 0, r, bytes);
        auto s = P2PEngine::makeSend(out.data(), bytes, 0, r, soon(), 20000);
        e.post(s);
        e.wait(s);
        return;
      }
      std::set<int> seen;
      for (int i = 1; i < n; ++i) {
        std::vector<uint8_t> in(bytes);
        auto v = P2PEngine::makeRecv(in.data(), bytes, kAnySource, kAnyTag, soon(), 20000);
        e.post(v);
        e.wait(v);
        const int src = v->result().source;
        EXPECT_EQ(v->result().tag, src);
        EXPECT_EQ(firstWrong(in, src, 0, src), -1) << "from " << src;
        seen.insert(src);
      }
      EXPECT_EQ(seen, (std::set<int>{1, 2, 3, 4}));
    });
  }
}

TEST(P2P, ManySmallMessagesInFlight) {
  // More eager bytes than the pool holds: the sender runs out of credit and goes on by
  // rendezvous; nothing is lost or reordered, and the receiver's pool stays bounded.
  const int count = 3000;
  P2PConfig cfg;
  cfg.poolBytes = 16 * 1024;
  cfg.eagerBytes = 1024;
  World w(2, 13, 4096, cfg);
  w.run([&](int r) {
    auto& e = *w.engines[r];
    std::vector<uint64_t> vals(count);
    std::vector<P2PHandle> ops;
    for (int i = 0; i < count; ++i) {
      if (r == 0) {
        vals[i] = 0x1000000ull * i + 7;
        ops.push_back(P2PEngine::makeSend(&vals[i], 8, 1, i % 3, soon(), 20000));
      } else {
        ops.push_back(P2PEngine::makeRecv(&vals[i], 8, 0, i % 3, soon(), 20000));
      }
    }
    if (r == 1) std::this_thread::sleep_for(50ms);  // let messages arrive unexpected
    e.post(ops);
    e.waitAll(ops);
    if (r == 1) {
      for (int i = 0; i < count; ++i) ASSERT_EQ(vals[i], 0x1000000ull * i + 7) << i;
      EXPECT_LE(e.unexpectedBytesPeak(), cfg.poolBytes);
    }
  });
}

TEST(P2P, LargeEarlyMessageIsNotBufferedWhole) {
  const size_t bytes = 8 << 20;
  World w(2, 0, 64 * 1024);
  w.run([&](int r) {
    auto& e = *w.engines[r];
    if (r == 0) {
      auto out = message(0, 1, 0, bytes);
      auto s = P2PEngine::makeSend(out.data(), bytes, 1, 0, soon(), 20000);
      e.post(s);
      e.wait(s);
    } else {
      std::this_thread::sleep_for(100ms);  // the Rts arrives long before the receive
      std::vector<uint8_t> in(bytes);
      auto v = P2PEngine::makeRecv(in.data(), bytes, 0, 0, soon(), 20000);
      e.post(v);
      e.wait(v);
      EXPECT_EQ(firstWrong(in, 0, 1, 0), -1);
      EXPECT_EQ(e.unexpectedBytesPeak(), 0u);
    }
  });
}

TEST(P2P, SendThatIsNeverReceivedTimesOutNamingPeerAndTag) {
  World w(2, 0, 64 * 1024);
  std::vector<uint8_t> out(1 << 20);
  auto s = P2PEngine::makeSend(out.data(), out.size(), 1, 42, Deadline::after(300ms), 300);
  const auto t0 = std::chrono::steady_clock::now();
  w.engines[0]->post(s);
  try {
    w.engines[0]->wait(s);
    FAIL() << "the send completed";
  } catch (const TimeoutError& e) {
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, 290ms);
    EXPECT_LT(took, 3s);
    EXPECT_EQ(e.info().peer, 1);
    EXPECT_NE(std::string(e.what()).find("tag 42"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not post a matching receive"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("test peer 1 is alive"), std::string::npos) << e.what();
  }
}

// A send that timed out before its receive was posted: the receive posted later does not
// fail on the cancelled message (its Cts crossed the Cancel); it takes the next one.
TEST(P2P, ATimedOutSendLeavesALaterReceiveOfItsTagToTheNextMessage) {
  World w(2, 0, 64 * 1024);
  std::vector<uint8_t> first(1 << 20, 1), second = message(0, 1, 8, 1 << 20), in(1 << 20);
  auto s1 = P2PEngine::makeSend(first.data(), first.size(), 1, 8, Deadline::after(100ms), 100);
  w.engines[0]->post(s1);
  EXPECT_THROW(w.engines[0]->wait(s1), TimeoutError);
  // Rank 1 has posted nothing meanwhile, so the Rts and the Cancel wait in its link.
  auto v = P2PEngine::makeRecv(in.data(), in.size(), 0, 8, soon(), 20000);
  w.engines[1]->post(v);
  auto s2 = P2PEngine::makeSend(second.data(), second.size(), 1, 8, soon(), 20000);
  w.engines[0]->post(s2);
  w.engines[0]->wait(s2);
  w.engines[1]->wait(v);
  EXPECT_EQ(firstWrong(in, 0, 1, 8), -1);
}

TEST(P2P, ReceiveThatNeverMatchesTimesOut) {
  World w(3, 0, 64 * 1024);
  uint32_t x = 0;
  auto v = P2PEngine::makeRecv(&x, 4, kAnySource, 5, Deadline::after(200ms), 200);
  w.engines[0]->post(v);
  EXPECT_THROW(w.engines[0]->wait(v), TimeoutError);
}

TEST(P2P, TruncationIsAnErrorOnBothSides) {
  for (size_t bytes : {size_t{100}, size_t{100000}}) {
    World w(2, 0, 64 * 1024);
    std::atomic<int> errors{0};
    w.run([&](int r) {
      auto& e = *w.engines[r];
      std::vector<uint8_t> buf(bytes);
      auto op = r == 0 ? P2PEngine::makeSend(buf.data(), bytes, 1, 0, soon(2s), 2000)
                       : P2PEngine::makeRecv(buf.data(), bytes / 2, 0, 0, soon(2s), 2000);
      e.post(op);
      try {
        e.wait(op);
      } catch (const InvalidArgumentError& err) {
        EXPECT_NE(std::string(err.what()).find("truncation"), std::string::npos);
        errors++;
      }
    });
    // The receiver always fails; a rendezvous sender learns it from the refusal (an eager
    // sender has completed already).
    EXPECT_EQ(errors.load(), bytes > 65536 ? 2 : 1) << bytes;
  }
}

TEST(P2P, AbortFailsEveryPendingOperation) {
  World w(2, 0, 64 * 1024);
  uint64_t x = 0;
  auto v = P2PEngine::makeRecv(&x, 8, 1, 0, soon(), 20000);
  w.engines[0]->post(v);
  ErrorInfo cause;
  cause.kind = ErrorKind::Timeout;
  cause.message = "test abort";
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    w.engines[0]->abort(cause);
  });
  EXPECT_THROW(w.engines[0]->wait(v), AbortedError);
  t.join();
  // The peer hears of it: its pending receive fails too.
  auto v1 = P2PEngine::makeRecv(&x, 8, 0, 0, soon(), 20000);
  w.engines[1]->post(v1);
  EXPECT_THROW(w.engines[1]->wait(v1), AbortedError);
}

TEST(P2P, CompletionCallbacksRunOnceAndProgressNeedsNoWaiter) {
  World w(2, 9, 16 * 1024);
  std::atomic<int> calls{0};
  std::vector<uint8_t> out = message(0, 1, 0, 200000), in(200000);
  auto cb = [&](const P2PResult&, std::exception_ptr e) {
    EXPECT_FALSE(e);
    calls++;
  };
  auto s = P2PEngine::makeSend(out.data(), out.size(), 1, 0, soon(), 20000, cb);
  auto v = P2PEngine::makeRecv(in.data(), in.size(), 0, 0, soon(), 20000, cb);
  w.engines[0]->post(s);
  w.engines[1]->post(v);
  // Nobody waits: the progress threads move the data.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while ((!s->done() || !v->done()) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(s->done() && v->done());
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(firstWrong(in, 0, 1, 0), -1);
}

// A receive posted while nobody drives is left to its caller for the grace: one that waits
// within it drives the receive itself (the completion runs on its thread), and no
// progress thread takes it over meanwhile. A long grace makes the outcome certain.
TEST(P2P, AReceiveWaitedOnWithinTheGraceIsDrivenByItsWaiter) {
  P2PConfig c;
  c.graceMicros = 10'000'000;  // 10 s: far longer than the test
  World w(2, 0, 64 * 1024, c);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> out = message(0, 1, trial, 1000), in(1000);
    std::thread::id completedOn;
    auto v = P2PEngine::makeRecv(
        in.data(), in.size(), 0, trial, soon(), 20000,
        [&](const P2PResult&, std::exception_ptr) { completedOn = std::this_thread::get_id(); });
    w.engines[1]->post(v);
    std::thread sender([&] {
      std::this_thread::sleep_for(2ms);  // the receive waits before the data comes
      auto s = P2PEngine::makeSend(out.data(), out.size(), 1, trial, soon(), 20000);
      w.engines[0]->post(s);
      w.engines[0]->wait(s);
    });
    w.engines[1]->wait(v);
    sender.join();
    EXPECT_EQ(completedOn, std::this_thread::get_id()) << "trial " << trial;
    EXPECT_EQ(firstWrong(in, 0, 1, trial), -1);
  }
}

// Nobody waits: the progress thread takes the receive up when the grace ends, not before.
TEST(P2P, AReceiveNobodyWaitsOnProgressesOnceTheGraceEnds) {
  P2PConfig c;
  c.graceMicros = 300'000;  // 300 ms
  World w(2, 0, 64 * 1024, c);
  std::vector<uint8_t> out = message(0, 1, 5, 1000), in(1000);
  auto sent = P2PEngine::makeSend(out.data(), out.size(), 1, 5, soon(), 20000);
  w.engines[0]->post(sent);
  w.engines[0]->wait(sent);  // the data is in rank 1's socket before its receive is posted
  std::atomic<bool> done{false};
  auto v = P2PEngine::makeRecv(in.data(), in.size(), 0, 5, soon(), 20000,
                               [&](const P2PResult&, std::exception_ptr) { done = true; });
  const auto posted = std::chrono::steady_clock::now();
  w.engines[1]->post(v);
  // The post itself took the message (it arrived first); a second one, sent after the
  // post, can only be moved by the progress thread.
  std::vector<uint8_t> in2(1000);
  std::atomic<bool> done2{false};
  auto v2 = P2PEngine::makeRecv(in2.data(), in2.size(), 0, 6, soon(), 20000,
                                [&](const P2PResult&, std::exception_ptr) { done2 = true; });
  w.engines[1]->post(v2);
  std::vector<uint8_t> out2 = message(0, 1, 6, 1000);
  auto s2 = P2PEngine::makeSend(out2.data(), out2.size(), 1, 6, soon(), 20000);
  w.engines[0]->post(s2);
  w.engines[0]->wait(s2);
  const auto until = posted + 10s;
  while (!done2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  const auto tookMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - posted)
                          .count();
  EXPECT_TRUE(done2.load());
  EXPECT_GE(tookMs, 250) << "the progress thread moved the receive before the grace ended";
  EXPECT_EQ(firstWrong(in2, 0, 1, 6), -1);
  w.engines[1]->wait(v);
  EXPECT_EQ(firstWrong(in, 0, 1, 5), -1);
}

// A caller that waits a long time lets the progress thread's timer back off (it looks
// twice as late each time it finds the caller driving, here up to 2 s); once the caller
// stops waiting with a receive still pending, the next look comes a grace later, not when
// the backed-off timer would have fired. Rank 1 waits on receive A for 600 ms with
// receive B posted too; B's message is sent 50 ms after A's, when nobody waits, so only
// the progress thread can move it: about 50 ms after A completes (the timer would next
// have fired about 420 ms after it).
TEST(P2P, AReceiveLeftPendingMovesAGraceAfterItsCallerStopsWaiting) {
  P2PConfig c;
  c.graceMicros = 2000;             // 2 ms
  c.idleLookMaxMicros = 2'000'000;  // 2 s
  World w(2, 0, 64 * 1024, c);
  std::vector<uint8_t> outA = message(0, 1, 1, 100), inA(100);
  std::vector<uint8_t> outB = message(0, 1, 2, 100), inB(100);
  auto a = P2PEngine::makeRecv(inA.data(), inA.size(), 0, 1, soon(), 20000);
  auto b = P2PEngine::makeRecv(inB.data(), inB.size(), 0, 2, soon(), 20000);
  w.engines[1]->post(std::vector<P2PHandle>{a, b});
  std::chrono::steady_clock::time_point aDone, bDone;
  w.run([&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(600ms);
      auto sa = P2PEngine::makeSend(outA.data(), outA.size(), 1, 1, soon(), 20000);
      w.engines[0]->post(sa);
      w.engines[0]->wait(sa);
      std::this_thread::sleep_for(50ms);
      auto sb = P2PEngine::makeSend(outB.data(), outB.size(), 1, 2, soon(), 20000);
      w.engines[0]->post(sb);
      w.engines[0]->wait(sb);
    } else {
      w.engines[1]->wait(a);
      aDone = std::chrono::steady_clock::now();
      const auto until = aDone + 10s;
      while (!b->done() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(1ms);
      }
      bDone = std::chrono::steady_clock::now();
    }
  });
  ASSERT_TRUE(b->done());
  const auto tookMs = std::chrono::duration_cast<std::chrono::milliseconds>(bDone - aDone).count();
  EXPECT_GE(tookMs, 40) << "B's message is sent 50 ms after A's";
  EXPECT_LT(tookMs, 250) << "the receive left pending waited for the backed-off timer";
  EXPECT_EQ(firstWrong(inA, 0, 1, 1), -1);
  EXPECT_EQ(firstWrong(inB, 0, 1, 2), -1);
}

// A caller that keeps posting (a window of irecv / isend) keeps the progress thread out:
// the grace counts from its last post, so a receive nobody waits on is taken up only
// once the posts stop for a grace or the bound (the grace plus the longer of the grace
// and 1 ms from the first post) is reached, here 400 ms with a grace of 200 ms.
TEST(P2P, TheGraceCountsFromTheLastPost) {
  P2PConfig c;
  c.graceMicros = 200'000;  // 200 ms
  World w(2, 0, 64 * 1024, c);
  // Rank 1 posts a receive whose message only the progress thread can move (it is sent
  // after the post, and a post reads nothing the driver did not poll for).
  std::vector<uint8_t> prime = message(0, 1, 5, 100), primeIn(100);
  auto p0 = P2PEngine::makeSend(prime.data(), prime.size(), 1, 5, soon(), 20000);
  auto p1 = P2PEngine::makeRecv(primeIn.data(), primeIn.size(), 0, 5, soon(), 20000);
  w.engines[0]->post(p0);
  w.engines[1]->post(p1);
  w.engines[1]->wait(p1);  // the link has been read to the end: it is drained
  w.engines[0]->wait(p0);
  std::vector<uint8_t> out = message(0, 1, 6, 1000), in(1000);
  std::atomic<bool> done{false};
  auto v = P2PEngine::makeRecv(in.data(), in.size(), 0, 6, soon(), 20000,
                               [&](const P2PResult&, std::exception_ptr) { done = true; });
  const auto posted = std::chrono::steady_clock::now();
  w.engines[1]->post(v);
  auto s = P2PEngine::makeSend(out.data(), out.size(), 1, 6, soon(), 20000);
  w.engines[0]->post(s);
  w.engines[0]->wait(s);
  // Rank 1 goes on posting receives of another tag every 50 ms for 350 ms.
  std::vector<uint8_t> spare(8 * 8);
  std::vector<P2PHandle> others;
  for (int i = 0; i < 7 && !done; ++i) {
    std::this_thread::sleep_for(50ms);
    others.push_back(P2PEngine::makeRecv(spare.data() + 8 * i, 8, 0, 100 + i, soon(), 20000));
    w.engines[1]->post(others.back());
  }
  const auto until = posted + 10s;
  while (!done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  const auto tookMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - posted)
                          .count();
  EXPECT_TRUE(done.load());
  EXPECT_GE(tookMs, 350) << "the progress thread took the receive up while posts went on";
  EXPECT_EQ(firstWrong(in, 0, 1, 6), -1);
  // The spare receives are matched by sends now, so the engines end with nothing pending.
  for (int i = 0; i < static_cast<int>(others.size()); ++i) {
    uint64_t x = 0;
    auto t = P2PEngine::makeSend(&x, 8, 1, 100 + i, soon(), 20000);
    w.engines[0]->post(t);
    w.engines[0]->wait(t);
    w.engines[1]->wait(others[static_cast<size_t>(i)]);
  }
}

// A link that counts its writes (what it carries goes to the link it wraps; the frames'
// byte counts are its own, as TxFrame counts on the link it is given).
class CountingLink final : public testing::ForwardingLink {
 public:
  using ForwardingLink::ForwardingLink;
  LinkIo writev(const iovec* iov, int iovcnt) override {
    writes++;
    return ForwardingLink::writev(iov, iovcnt);
  }
  std::atomic<int> writes{0};
};

// Rank 0's link to rank 1 counts its writes.
CountingLink& countWrites(World& w) {
  auto counting = std::make_unique<CountingLink>(std::move(w.sources[0].links_[1]));
  CountingLink& c = *counting;
  w.sources[0].links_[1] = std::move(counting);
  return c;
}

// A window of sendAsync posted back to back, then waited on (osu_bw's pattern), with the
// post times set 1 us apart (P2POp::posted), so that the outcome does not hang on how fast
// this machine posts: the first post moves at once, the next 63 wait, the 64th of them moves
// them all in one write, and the wait writes the rest: 1 + ceil((n - 1) / 64) writes for n
// posts (a write per message without the batching). The data and the byte counts are exact.
TEST(P2P, ABurstOfSmallSendsSharesWrites) {
  for (const int count : {64, 65, 200}) {
    P2PConfig c;
    c.graceMicros = 10'000'000;  // the progress thread stays out of the count
    World w(2, 0, 256 * 1024, c);
    CountingLink& link = countWrites(w);
    const auto t0 = std::chrono::steady_clock::now();
    w.run([&](int r) {
      auto& e = *w.engines[r];
      std::vector<uint64_t> vals(count);
      std::vector<P2PHandle> ops;
      if (r == 1) {
        for (int i = 0; i < count; ++i) {
          ops.push_back(P2PEngine::makeRecv(&vals[i], 8, 0, i % 5, soon(), 20000));
        }
        e.post(ops);
      } else {
        for (int i = 0; i < count; ++i) vals[i] = 0x10001ull * i + 3;
        for (int i = 0; i < count; ++i) {
          ops.push_back(P2PEngine::makeSend(&vals[i], 8, 1, i % 5, soon(), 20000));
          ops.back()->posted = t0 + std::chrono::microseconds(i);
          e.post(ops.back());  // one post at a time, each its own call
        }
      }
      e.waitAll(ops);
      if (r == 1) {
        for (int i = 0; i < count; ++i) ASSERT_EQ(vals[i], 0x10001ull * i + 3) << i;
      }
    });
    EXPECT_EQ(link.writes.load(), 1 + (count - 1 + 63) / 64) << count << " posts";
    EXPECT_EQ(link.counters().wireSent.load(),
              static_cast<uint64_t>(count) * (wire::kHeaderSize + 8));
    EXPECT_EQ(link.counters().messagesSent.load(), static_cast<uint64_t>(count));
  }
}

// Rendezvous chunks share writes, as envelopes do: 40 messages past the eager limit (one
// chunk or three each), their receives posted first. Once the Cts are in, the 80 chunks
// leave several to a writev (at most 64 frames and 256 KiB each, so 2 or more writes, and
// one for the Rts), not one write each (81 writes). Sent alone, a 64 KiB chunk on loopback
// made a full segment and a tiny one (bibw at 64 KiB at half speed). Each operation's
// counters stay exact when its chunks share a write (it completes on the chunk that ends
// it), and so does the data; with a seed the link takes a few bytes at a time, so chunks
// batched behind a frame go back to their streams and are taken again.
TEST(P2P, RendezvousChunksShareWrites) {
  for (const uint64_t seed : {uint64_t{0}, uint64_t{7}, uint64_t{12345}}) {
    P2PConfig c;
    c.graceMicros = 10'000'000;  // the progress thread stays out of the count
    c.eagerBytes = 1024;
    c.chunkBytes = 4096;
    World w(2, seed, 1 << 20, c);
    CountingLink& link = countWrites(w);
    constexpr int kCount = 40;
    auto sizeOf = [](int i) -> size_t { return i % 2 == 0 ? 3000 : 10000; };
    std::vector<std::vector<uint8_t>> in(kCount), out(kCount);
    std::vector<P2PHandle> recvs, sends;
    for (int i = 0; i < kCount; ++i) {
      in[i].assign(sizeOf(i), 0xA5);
      out[i] = message(0, 1, i, sizeOf(i));
      recvs.push_back(P2PEngine::makeRecv(in[i].data(), sizeOf(i), 0, i, soon(), 20000));
      sends.push_back(P2PEngine::makeSend(out[i].data(), sizeOf(i), 1, i, soon(), 20000));
    }
    w.engines[1]->post(recvs);  // before any Rts arrives: every Cts goes at once
    w.run([&](int r) {
      if (r == 0) {
        w.engines[0]->post(sends);
        w.engines[0]->waitAll(sends);
      } else {
        w.engines[1]->waitAll(recvs);
      }
    });
    uint64_t wire = 0;
    for (int i = 0; i < kCount; ++i) {
      EXPECT_EQ(firstWrong(in[i], 0, 1, i), -1) << "message " << i << " seed " << seed;
      const size_t chunks = (sizeOf(i) + c.chunkBytes - 1) / c.chunkBytes;
      const PeerCounters& pc = sends[i]->result().stats.traffic.perPeer.at(1);
      EXPECT_EQ(pc.payloadSent, sizeOf(i)) << i;
      EXPECT_EQ(pc.messagesSent, 1 + chunks) << i << ": the Rts and the chunks";
      EXPECT_EQ(pc.wireSent, sizeOf(i) + wire::kHeaderSize * (1 + chunks)) << i;
      EXPECT_EQ(recvs[i]->result().bytes, sizeOf(i)) << i;
      wire += pc.wireSent;
    }
    EXPECT_EQ(link.counters().wireSent.load(), wire);
    if (seed == 0) {
      EXPECT_GE(link.writes.load(), 3) << "the Rts, then 80 chunks in 64-frame writes";
      EXPECT_LE(link.writes.load(), 10) << "chunks sent one to a write";
    }
  }
}

// The burst rule, with the post times set by the caller (P2POp::posted): a post that
// follows the last within the burst gap waits for the next drive; one after a longer
// gap moves at once, and takes the waiting ones along in the same write.
TEST(P2P, APostInABurstWaitsForTheNextDrive) {
  P2PConfig c;
  c.graceMicros = 10'000'000;  // the progress thread stays out of the test
  World w(2, 0, 256 * 1024, c);
  CountingLink& link = countWrites(w);
  std::vector<uint64_t> vals = {11, 22, 33, 44}, in(4);
  std::vector<P2PHandle> sends;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < vals.size(); ++i) {
    sends.push_back(P2PEngine::makeSend(&vals[i], 8, 1, 4, soon(), 20000));
  }
  sends[0]->posted = t0;
  sends[1]->posted = t0 + 1us;       // within the gap: part of a burst
  sends[2]->posted = t0 + 1s;        // long after: moves at once
  sends[3]->posted = t0 + 1s + 1us;  // within the gap, but after a wait
  w.engines[0]->post(sends[0]);
  EXPECT_TRUE(sends[0]->done()) << "the first post of a burst moves at once";
  EXPECT_EQ(link.writes.load(), 1);
  w.engines[0]->post(sends[1]);
  EXPECT_FALSE(sends[1]->done()) << "a post within the gap waits for the next drive";
  EXPECT_EQ(link.writes.load(), 1);
  w.engines[0]->post(sends[2]);
  EXPECT_TRUE(sends[1]->done() && sends[2]->done());
  EXPECT_EQ(link.writes.load(), 2) << "the two waiting sends share one write";
  w.engines[0]->wait(sends[2]);  // done already: it only ends the burst
  w.engines[0]->post(sends[3]);
  EXPECT_TRUE(sends[3]->done()) << "a wait ends a burst: the next post moves at once";
  EXPECT_EQ(link.writes.load(), 3);
  std::vector<P2PHandle> recvs;
  for (size_t i = 0; i < vals.size(); ++i) {
    recvs.push_back(P2PEngine::makeRecv(&in[i], 8, 0, 4, soon(), 20000));
  }
  w.engines[1]->post(recvs);
  w.engines[1]->waitAll(recvs);
  EXPECT_EQ(in, vals);
}

// A burst nobody waits on still leaves: the progress thread takes it up once the grace
// ends, however many posts were held back (a burst holds back at most a write's worth).
TEST(P2P, ABurstNobodyWaitsOnStillLeaves) {
  World w(2, 7, 16 * 1024);
  const int count = 300;
  std::vector<uint32_t> out(count), in(count);
  std::vector<P2PHandle> sends, recvs;
  for (int i = 0; i < count; ++i) {
    out[i] = 1000003u * i;
    recvs.push_back(P2PEngine::makeRecv(&in[i], 4, 0, 2, soon(), 20000));
  }
  w.engines[1]->post(recvs);
  for (int i = 0; i < count; ++i) {
    sends.push_back(P2PEngine::makeSend(&out[i], 4, 1, 2, soon(), 20000));
    w.engines[0]->post(sends.back());
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  auto allDone = [&] {
    for (int i = 0; i < count; ++i) {
      if (!sends[i]->done() || !recvs[i]->done()) return false;
    }
    return true;
  };
  while (!allDone() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(allDone());
  EXPECT_EQ(in, out);
}

TEST(P2P, ClosedPeerFailsItsReceives) {
  World w(2, 0, 64 * 1024);
  w.sources[1].links_[0]->shutdownWrite();
  uint64_t x = 0;
  auto v = P2PEngine::makeRecv(&x, 8, 1, 0, soon(), 20000);
  w.engines[0]->post(v);
  EXPECT_THROW(w.engines[0]->wait(v), PeerClosedError);
}

}  // namespace
}  // namespace tccl
