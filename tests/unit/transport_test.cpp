// The transport's links per (peer, lane) in one process over a HashStore: both lanes
// connected at once from two threads per rank, lanes that never mix, the duplicate rule
// per lane, a hello naming an unknown lane, one lane's wait that never holds up the
// other's, aborts and closes per lane, stats summed over lanes, and the address cache
// read through a caller's own store.
#include "transport/transport.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "link_testing.hpp"
#include "net/socket.hpp"
#include "scoped_env.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using testing::ScopedEnv;

TransportConfig configFor(int rank, int world) {
  TransportConfig c;
  c.rank = rank;
  c.worldSize = world;
  c.jobId = 501;
  c.commId = 502;
  c.authKeyFromEnv = false;
  return c;
}

std::vector<int> othersOf(int rank, int world) {
  std::vector<int> p;
  for (int r = 0; r < world; ++r) {
    if (r != rank) p.push_back(r);
  }
  return p;
}

// Sends one message on `link`, waiting when it is full.
void sendOn(Link& link, const wire::MessageHeader& h, const uint8_t* payload) {
  const Deadline deadline = Deadline::after(10s);
  TxFrame tx;
  tx.start(h, payload);
  while (!tx.done()) {
    const LinkIo io = tx.pump(link);
    if (io.status == LinkStatus::Blocked) {
      std::vector<LinkWait> w = {{&link, false, true, 0}};
      ASSERT_TRUE(waitLinks(w, -1, deadline));
    } else {
      ASSERT_EQ(io.status, LinkStatus::Progress) << link.errorText();
    }
  }
}

// Receives one message (payload into *payload); the final status: Progress when one
// came, Closed at end of file.
LinkStatus recvOn(Link& link, wire::MessageHeader* h, std::vector<uint8_t>* payload) {
  return testing::recvFrame(link, h, payload, Deadline::after(10s));
}

// World `n`: every rank connects both lanes to every other rank at once, one thread per
// lane, while another thread reads the stats.
TEST(TransportLanes, BothLanesConnectAtOnceFromTwoThreadsAndNeverMix) {
  const int n = 4;
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(std::make_unique<Transport>(configFor(r, n), store));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (auto& t : ts) {
        (void)t->stats();
        (void)t->connectedPeers(Lane::P2P);
      }
      std::this_thread::sleep_for(1ms);
    }
  });
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2 * n);
  for (int r = 0; r < n; ++r) {
    for (Lane lane : {Lane::Collective, Lane::P2P}) {
      threads.emplace_back([&, r, lane] {
        try {
          ts[static_cast<size_t>(r)]->connect(othersOf(r, n), Deadline::after(20s), lane);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(2 * r + static_cast<int>(lane))] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  done = true;
  reader.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < n; ++r) {
    Transport& t = *ts[static_cast<size_t>(r)];
    EXPECT_EQ(t.connectedPeers(Lane::Collective), othersOf(r, n));
    EXPECT_EQ(t.connectedPeers(Lane::P2P), othersOf(r, n));
    EXPECT_EQ(t.connectedPeers(), othersOf(r, n));
    const CommStats s = t.stats();
    for (int p : othersOf(r, n)) {
      EXPECT_TRUE(t.connected(p, Lane::P2P));
      EXPECT_EQ(t.link(p, Lane::P2P).lane(), Lane::P2P);
      EXPECT_EQ(t.link(p).lane(), Lane::Collective);
      EXPECT_EQ(t.link(p).peer(), p);
      // One handshake message each way per lane: summed over both lanes.
      EXPECT_EQ(s.perPeer.at(p).wireSent, 2 * wire::kHelloSize) << "rank " << r << " peer " << p;
      EXPECT_EQ(s.perPeer.at(p).wireRecv, 2 * wire::kHelloSize);
    }
  }
  // A message on each lane from 0 to 3 arrives on the same lane.
  for (Lane lane : {Lane::Collective, Lane::P2P}) {
    wire::MessageHeader h;
    h.step = 10 + static_cast<uint32_t>(lane);
    h.length = 5;
    const uint8_t payload[5] = {1, 2, 3, 4, static_cast<uint8_t>(lane)};
    sendOn(ts[0]->link(3, lane), h, payload);
  }
  for (Lane lane : {Lane::P2P, Lane::Collective}) {
    wire::MessageHeader h;
    std::vector<uint8_t> got;
    ASSERT_EQ(recvOn(ts[3]->link(0, lane), &h, &got), LinkStatus::Progress);
    EXPECT_EQ(h.step, 10 + static_cast<uint32_t>(lane));
    EXPECT_EQ(got, (std::vector<uint8_t>{1, 2, 3, 4, static_cast<uint8_t>(lane)}));
  }
  EXPECT_EQ(ts[0]->stats().perPeer.at(3).payloadSent, 10u);
  EXPECT_EQ(ts[0]->stats().perPeer.at(3).messagesSent, 2u);
  ts[0]->resetStats();
  EXPECT_EQ(ts[0]->stats().perPeer.at(3).wireSent, 0u);
  EXPECT_THROW(ts[0]->link(0, Lane::P2P), Error);
}

// A raw peer: dials `t`, sends a Hello from rank 0 for `lane` (after `pause`), returns
// the reply; *sent: when the Hello went.
wire::Hello rawHello(const Transport& t, uint32_t lane, net::Fd* keep,
                     std::chrono::milliseconds pause = 0ms,
                     std::chrono::steady_clock::time_point* sent = nullptr) {
  auto [host, port] = net::splitHostPort(t.listenAddress());
  *keep = net::connectWithRetry(host, port, Deadline::after(5s));
  std::this_thread::sleep_for(pause);
  if (sent) *sent = std::chrono::steady_clock::now();
  wire::Hello h;
  h.jobId = 501;
  h.commId = 502;
  h.rank = 0;
  h.worldSize = 2;
  h.targetRank = 1;
  h.lane = lane;
  uint8_t b[wire::kHelloSize];
  wire::encodeHello(h, b);
  EXPECT_EQ(net::sendAll(keep->get(), b, sizeof b, Deadline::after(5s)), net::IoStatus::Ok);
  wire::Hello reply;
  if (net::recvAll(keep->get(), b, sizeof b, Deadline::after(10s)) != net::IoStatus::Ok) {
    ADD_FAILURE() << "no reply";
    return reply;
  }
  EXPECT_EQ(wire::decodeHello(b, &reply), wire::DecodeStatus::Ok);
  return reply;
}

// The acceptor's p2p thread waits a long time for its peer's p2p dial; meanwhile its
// collectives' connection must complete as soon as the peer dials it, whichever thread
// accepts it.
TEST(TransportLanes, OneLanesLongWaitDoesNotHoldUpTheOther) {
  auto store = std::make_shared<HashStore>();
  Transport acceptor(configFor(1, 2), store);
  Transport dialler(configFor(0, 2), store);
  // Started first: it polls the listener and will likely accept the collectives' dial.
  auto p2p = std::async(std::launch::async, [&] {
    acceptor.connect({0}, Deadline::after(20s), Lane::P2P);
    return std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(50ms);
  auto coll = std::async(std::launch::async, [&] {
    acceptor.connect({0}, Deadline::after(20s), Lane::Collective);
    return std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(50ms);
  const auto dialled = std::chrono::steady_clock::now();
  dialler.connect({1}, Deadline::after(10s), Lane::Collective);
  const auto collDone = coll.get();
  EXPECT_LT(collDone - dialled, 500ms) << "the collectives' connect waited for the other lane";
  EXPECT_EQ(p2p.wait_for(300ms), std::future_status::timeout) << "the p2p lane is not dialled yet";
  dialler.connect({1}, Deadline::after(10s), Lane::P2P);
  const auto p2pDone = p2p.get();
  EXPECT_GT(p2pDone, collDone);
  EXPECT_TRUE(acceptor.connected(0, Lane::Collective));
  EXPECT_TRUE(acceptor.connected(0, Lane::P2P));
}

// A connection accepted by one lane's thread, whose Hello arrives later and completes
// the other lane's link: the other thread, asleep in its own poll, is woken at once
// (without the wake-up it would sleep out its one-second poll). Which thread accepts
// is up to the scheduler, so a few rounds.
TEST(TransportLanes, ALinkMadeByTheOtherThreadWakesItsWaiter) {
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto store = std::make_shared<HashStore>();
    Transport acceptor(configFor(1, 2), store);
    auto p2p = std::async(std::launch::async,
                          [&] { acceptor.connect({0}, Deadline::after(10s), Lane::P2P); });
    auto coll = std::async(std::launch::async, [&] {
      acceptor.connect({0}, Deadline::after(10s), Lane::Collective);
      return std::chrono::steady_clock::now();
    });
    std::this_thread::sleep_for(30ms);  // both asleep in poll
    net::Fd c0, c1;
    std::chrono::steady_clock::time_point sent;
    EXPECT_EQ(rawHello(acceptor, 0, &c0, 150ms, &sent).kind, wire::HelloKind::Accept);
    const auto collDone = coll.get();
    EXPECT_LT(collDone - sent, 400ms) << "the collectives' thread slept through its link";
    EXPECT_EQ(rawHello(acceptor, 1, &c1).kind, wire::HelloKind::Accept);
    p2p.get();
  }
}

TEST(TransportLanes, DuplicatesAreJudgedPerLaneAndAnUnknownLaneIsRejected) {
  ScopedEnv debug("TCCL_DEBUG", "WARN");
  auto store = std::make_shared<HashStore>();
  Transport acceptor(configFor(1, 2), store);
  ::testing::internal::CaptureStderr();
  std::string waitError;
  auto acc = std::async(std::launch::async, [&] {
    // Nobody real dials lane 1: it times out, quoting the refused stranger.
    acceptor.connect({0}, Deadline::after(10s), Lane::Collective);
    try {
      acceptor.connect({0}, Deadline::after(1500ms), Lane::P2P);
    } catch (const Error& e) {
      waitError = e.what();
    }
  });
  net::Fd c0, c0again, c1, bad;
  const wire::Hello r0 = rawHello(acceptor, 0, &c0);
  EXPECT_EQ(r0.kind, wire::HelloKind::Accept);
  EXPECT_EQ(r0.lane, 0u) << "the acceptor's reply names the lane";
  std::this_thread::sleep_for(100ms);  // the first connect returned; the p2p one serves
  const wire::Hello again = rawHello(acceptor, 0, &c0again);
  EXPECT_EQ(again.kind, wire::HelloKind::Reject);
  EXPECT_EQ(again.reason, wire::RejectReason::Duplicate);
  const wire::Hello r2 = rawHello(acceptor, 2, &bad);
  EXPECT_EQ(r2.kind, wire::HelloKind::Reject);
  EXPECT_EQ(r2.reason, wire::RejectReason::BadLane);
  acc.get();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("unknown connection lane"), std::string::npos) << log;
  EXPECT_NE(log.find("(lane 2)"), std::string::npos) << log;
  EXPECT_NE(log.find("already exists"), std::string::npos) << log;
  EXPECT_NE(waitError.find("on the p2p lane"), std::string::npos) << waitError;
  EXPECT_NE(waitError.find("unknown connection lane"), std::string::npos) << waitError;
  EXPECT_TRUE(acceptor.connected(0, Lane::Collective));
  EXPECT_FALSE(acceptor.connected(0, Lane::P2P));
  // The same rank on the other lane is welcome.
  auto acc2 = std::async(std::launch::async,
                         [&] { acceptor.connect({0}, Deadline::after(10s), Lane::P2P); });
  const wire::Hello r1 = rawHello(acceptor, 1, &c1);
  EXPECT_EQ(r1.kind, wire::HelloKind::Accept);
  EXPECT_EQ(r1.lane, 1u);
  EXPECT_NO_THROW(acc2.get());
  EXPECT_TRUE(acceptor.connected(0, Lane::P2P));
}

TEST(TransportLanes, AbortAndCloseActOnOneLane) {
  auto store = std::make_shared<HashStore>();
  Transport a(configFor(0, 2), store);
  Transport b(configFor(1, 2), store);
  for (Lane lane : {Lane::Collective, Lane::P2P}) {
    auto acc = std::async(std::launch::async, [&] { b.connect({0}, Deadline::after(10s), lane); });
    a.connect({1}, Deadline::after(10s), lane);
    acc.get();
  }
  wire::MessageHeader abort;
  abort.kind = wire::MsgKind::Abort;
  abort.seq = 4;
  abort.fingerprint = 0;
  a.abortAll(abort);  // the collectives' lane by default
  EXPECT_TRUE(a.connectedPeers(Lane::Collective).empty());
  EXPECT_EQ(a.connectedPeers(Lane::P2P), std::vector<int>{1});
  wire::MessageHeader h;
  std::vector<uint8_t> got;
  ASSERT_EQ(recvOn(b.link(0, Lane::Collective), &h, &got), LinkStatus::Progress);
  EXPECT_EQ(h, abort);
  EXPECT_EQ(recvOn(b.link(0, Lane::Collective), &h, &got), LinkStatus::Closed);
  // The p2p lane still works both ways.
  wire::MessageHeader data;
  data.kind = wire::MsgKind::Eager;
  data.length = 3;
  const uint8_t payload[3] = {7, 8, 9};
  sendOn(b.link(0, Lane::P2P), data, payload);
  ASSERT_EQ(recvOn(a.link(1, Lane::P2P), &h, &got), LinkStatus::Progress);
  EXPECT_EQ(got, (std::vector<uint8_t>{7, 8, 9}));
  a.closeAll(Lane::P2P);
  EXPECT_TRUE(a.connectedPeers(Lane::P2P).empty());
  EXPECT_EQ(recvOn(b.link(0, Lane::P2P), &h, &got), LinkStatus::Closed);
}

TEST(TransportAddress, PublishedAddressThroughTheCallersOwnStore) {
  auto store = std::make_shared<HashStore>();
  Transport t(configFor(0, 3), store);
  EXPECT_EQ(t.publishedAddress(0), t.listenAddress());
  EXPECT_EQ(t.publishedAddress(2), "") << "not published yet";
  // Another connection to the same store (the heartbeat's) sees what rank 2 publishes.
  HashStore other;
  other.setString("addr/2", "10.0.0.2:4000");
  EXPECT_EQ(t.publishedAddress(2, &other), "10.0.0.2:4000");
  // Cached: later readers get the same answer whatever store they pass.
  EXPECT_EQ(t.publishedAddress(2), "10.0.0.2:4000");
  // From several threads at once.
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 100; ++k) right += t.publishedAddress(2, &other) == "10.0.0.2:4000";
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(right.load(), 400);
}

}  // namespace
}  // namespace tccl
