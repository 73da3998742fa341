// Several sockets per peer in the transport (TCCL_NSOCKS, docs/nsocks.md), ranks as
// transports of one process over a HashStore: one socket per peer is a TcpLink as before;
// K sockets make a StripedLink whose counters hold K handshakes, beside a p2p lane of one;
// a striped message crosses it exactly; ranks whose counts differ are refused on both
// sides with both ranks and both values named.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "link_testing.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"
#include "transport/striped_link.hpp"
#include "transport/tcp_link.hpp"
#include "transport/transport.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;

TransportConfig configFor(int rank, int world, int nsocks) {
  TransportConfig c;
  c.rank = rank;
  c.worldSize = world;
  c.jobId = 601;
  c.commId = 602;
  c.authKeyFromEnv = false;
  c.nsocks = nsocks;
  c.stripeMinBytes = 4096;
  return c;
}

// Every rank connects `lane` to every other at once; returns each rank's error ("" if none).
std::vector<std::string> connectAll(std::vector<std::unique_ptr<Transport>>& ts, Lane lane) {
  const int n = static_cast<int>(ts.size());
  std::vector<std::string> errors(ts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> peers;
      for (int p = 0; p < n; ++p) {
        if (p != r) peers.push_back(p);
      }
      try {
        ts[static_cast<size_t>(r)]->connect(peers, Deadline::after(10s), lane);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(TransportNsocks, OneSocketPerPeerIsATcpLinkAsBefore) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < 2; ++r) ts.push_back(std::make_unique<Transport>(configFor(r, 2, 1), store));
  for (const std::string& e : connectAll(ts, Lane::Collective)) EXPECT_EQ(e, "");
  EXPECT_NE(dynamic_cast<TcpLink*>(&ts[0]->link(1)), nullptr);
  EXPECT_EQ(dynamic_cast<StripedLink*>(&ts[0]->link(1)), nullptr);
  EXPECT_EQ(ts[0]->stats().perPeer.at(1).wireSent, wire::kHelloSize);
}

TEST(TransportNsocks, KSocketsMakeAStripedLinkBesideAP2PLaneOfOne) {
  const int n = 3, k = 3;
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(std::make_unique<Transport>(configFor(r, n, k), store));
  for (const std::string& e : connectAll(ts, Lane::Collective)) EXPECT_EQ(e, "");
  for (const std::string& e : connectAll(ts, Lane::P2P)) EXPECT_EQ(e, "");
  for (int r = 0; r < n; ++r) {
    const CommStats s = ts[static_cast<size_t>(r)]->stats();
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      auto* striped = dynamic_cast<StripedLink*>(&ts[static_cast<size_t>(r)]->link(p));
      ASSERT_NE(striped, nullptr) << "rank " << r << " peer " << p;
      EXPECT_EQ(striped->stripeCount(), k);
      EXPECT_EQ(striped->peer(), p);
      EXPECT_NE(dynamic_cast<TcpLink*>(&ts[static_cast<size_t>(r)]->link(p, Lane::P2P)), nullptr);
      // One handshake message each way per connection: k on the collectives' lane, 1 p2p.
      EXPECT_EQ(s.perPeer.at(p).wireSent, (k + 1) * wire::kHelloSize);
      EXPECT_EQ(s.perPeer.at(p).wireRecv, (k + 1) * wire::kHelloSize);
    }
  }
  // A striped message from 0 to 2 arrives whole, and both counters count its bytes.
  std::vector<uint8_t> data(300001);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + i / 251);
  wire::MessageHeader h;
  h.seq = 11;
  h.length = data.size();
  Link& tx = ts[0]->link(2);
  Link& rx = ts[2]->link(0);
  const PeerCounters before = tx.counters().snapshot();
  std::thread sender([&] {
    EXPECT_EQ(testing::sendFrame(tx, h, data.data(), Deadline::after(10s)), LinkStatus::Progress);
  });
  RxFrame frame;
  std::vector<uint8_t> got(data.size());
  EXPECT_EQ(testing::recvFrame(rx, frame, got.data(), got.size(), Deadline::after(10s)),
            LinkStatus::Progress);
  sender.join();
  EXPECT_EQ(frame.header(), h);
  EXPECT_EQ(got, data);
  EXPECT_EQ(tx.counters().snapshot().payloadSent - before.payloadSent, data.size());
  EXPECT_EQ(rx.counters().snapshot().payloadRecv, data.size());
}

TEST(TransportNsocks, RanksWithAnotherCountAreRefusedNamingBothRanksAndValues) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<Transport>> ts;
  ts.push_back(std::make_unique<Transport>(configFor(0, 2, 2), store));
  ts.push_back(std::make_unique<Transport>(configFor(1, 2, 3), store));
  const std::vector<std::string> errors = connectAll(ts, Lane::Collective);
  // Rank 0 dials with 2 and is refused by rank 1; rank 1 refuses and fails at once.
  EXPECT_NE(errors[0].find("rank 1 has TCCL_NSOCKS=3 and rank 0 has TCCL_NSOCKS=2"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 0 has TCCL_NSOCKS=2 and rank 1 has TCCL_NSOCKS=3"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("Handshake"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("Handshake"), std::string::npos) << errors[1];
  EXPECT_FALSE(ts[0]->connected(1));
  EXPECT_FALSE(ts[1]->connected(0));
}

}  // namespace
}  // namespace tccl
