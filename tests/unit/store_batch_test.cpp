// The batched requests (multiGet, multiSet, compareSet) on every Store, the server's
// index of parked requests, and one TcpStore connection shared by several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store/store_protocol.hpp"
#include "store/store_waiters.hpp"
#include "store_testing.hpp"
#include "tccl/error.hpp"

namespace tccl {
namespace {

using namespace storetest;

template <typename Factory>
class StoreBatch : public StoreConformance<Factory> {};
TYPED_TEST_SUITE(StoreBatch, Factories, FactoryName);

TYPED_TEST(StoreBatch, MultiSetThenMultiGetInOrder) {
  Store& s = *this->store;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  for (int i = 0; i < 37; ++i) {
    keys.push_back("host/" + std::to_string(i));
    Bytes v(static_cast<size_t>(i));  // 0 .. 36 bytes: the empty value included
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<uint8_t>(i * 31 + j);
    values.push_back(v);
  }
  s.multiSet(keys, values);
  auto other = this->factory.another();
  // Asked in a different order, with a repeat: each value comes back where it was asked.
  std::vector<std::string> ask = {keys[5], keys[0], keys[36], keys[5]};
  std::vector<Bytes> got = other->multiGet(ask);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], values[5]);
  EXPECT_EQ(got[1], values[0]);
  EXPECT_EQ(got[2], values[36]);
  EXPECT_EQ(got[3], values[5]);
  EXPECT_EQ(other->multiGet(keys), values);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(s.get(keys[i]), values[i]);
  EXPECT_TRUE(other->multiGet({}).empty());
  s.multiSet({}, {});  // nothing to do, and no error
  EXPECT_THROW(s.multiSet({"a", "b"}, {Bytes()}), InvalidArgumentError);
  EXPECT_FALSE(s.check({"a"}));
}

TYPED_TEST(StoreBatch, MultiGetWaitsForTheLastKey) {
  Store& s = *this->store;
  s.setString("m/0", "zero");
  auto writer = this->factory.another();
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    writer->setString("m/1", "one");
  });
  const auto start = Clock::now();
  std::vector<Bytes> got = s.multiGet({"m/0", "m/1"});
  late.join();
  EXPECT_GE(msSince(start), 40);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], bytesOf("zero"));
  EXPECT_EQ(got[1], bytesOf("one"));
}

TYPED_TEST(StoreBatch, MultiGetTimeoutNamesOnlyTheMissingKeys) {
  Store& s = *this->store;
  s.setString("p/0", "x");
  s.setTimeout(kShortTimeout);
  const auto start = Clock::now();
  try {
    s.multiGet({"p/0", "p/1", "p/2"});
    ADD_FAILURE() << "expected a timeout";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("p/1"), std::string::npos) << what;
    EXPECT_NE(what.find("p/2"), std::string::npos) << what;
    EXPECT_EQ(e.cause().find("p/0"), std::string::npos) << what;
  }
  EXPECT_GE(msSince(start), kShortTimeout.count() - 2);
  EXPECT_LT(msSince(start), kShortTimeout.count() + 3000);
}

TYPED_TEST(StoreBatch, CompareSetFollowsTorchSemantics) {
  Store& s = *this->store;
  auto other = this->factory.another();
  // Absent key, empty expected: created.
  EXPECT_EQ(s.compareSet("leader", Bytes(), bytesOf("r3")), bytesOf("r3"));
  // Absent key, non-empty expected: nothing stored, empty answer.
  EXPECT_EQ(s.compareSet("nobody", bytesOf("x"), bytesOf("y")), Bytes());
  EXPECT_FALSE(s.check({"nobody"}));
  // Present, expected differs: unchanged, the current value answered.
  EXPECT_EQ(other->compareSet("leader", bytesOf("r9"), bytesOf("r5")), bytesOf("r3"));
  EXPECT_EQ(s.getString("leader"), "r3");
  // Present, expected matches: swapped.
  EXPECT_EQ(other->compareSet("leader", bytesOf("r3"), bytesOf("r5")), bytesOf("r5"));
  EXPECT_EQ(s.getString("leader"), "r5");
}

TYPED_TEST(StoreBatch, CompareSetIsAtomicAcrossClients) {
  // Eight clients race to claim one key; exactly one wins, and all agree on the winner.
  constexpr int kClients = 8;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(this->factory.another());
  std::vector<std::string> seen(kClients);
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const Bytes mine = bytesOf("client " + std::to_string(i));
      const Bytes now = clients[static_cast<size_t>(i)]->compareSet("claim", Bytes(), mine);
      if (now == mine) ++winners;
      seen[static_cast<size_t>(i)] = std::string(now.begin(), now.end());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
  for (const std::string& v : seen) EXPECT_EQ(v, seen[0]);
  EXPECT_EQ(this->store->getString("claim"), seen[0]);
}

// ---- the server's waiter index -------------------------------------------------------

storeproto::Request waitFor(std::vector<std::string> keys) {
  storeproto::Request r;
  r.command = storeproto::Command::Wait;
  r.keys = std::move(keys);
  return r;
}

TEST(StoreWaiterIndex, ReadyWhenTheLastDistinctKeyIsCreated) {
  store::WaiterIndex idx;
  const uint64_t a = idx.add(1, waitFor({"x", "y", "x"}), Deadline::never(), {"x", "y", "x"});
  const uint64_t b = idx.add(2, waitFor({"y"}), Deadline::never(), {"y"});
  EXPECT_EQ(idx.find(a)->missing, 2u);  // x counted once
  EXPECT_TRUE(idx.keyCreated("z").empty());
  EXPECT_TRUE(idx.keyCreated("x").empty());
  EXPECT_EQ(idx.find(a)->missing, 1u);
  EXPECT_EQ(idx.keyCreated("y"), (std::vector<uint64_t>{a, b}));  // in parking order
  EXPECT_TRUE(idx.keyCreated("y").empty());                       // the index forgets a created key
  idx.take(a);
  idx.take(b);
  EXPECT_EQ(idx.size(), 0u);
  EXPECT_EQ(idx.indexedKeys(), 0u);
}

TEST(StoreWaiterIndex, RemovedWaitersLeaveNoEntries) {
  store::WaiterIndex idx;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    ids.push_back(idx.add(static_cast<uint64_t>(i), waitFor({"shared", "own/" + std::to_string(i)}),
                          Deadline::never(), {"shared", "own/" + std::to_string(i)}));
  }
  EXPECT_EQ(idx.indexedKeys(), 101u);
  for (size_t i = 0; i < ids.size(); i += 2) idx.remove(ids[i]);
  idx.remove(ids[0]);  // twice: harmless
  EXPECT_EQ(idx.size(), 50u);
  EXPECT_EQ(idx.indexedKeys(), 51u);
  EXPECT_TRUE(idx.keyCreated("shared").empty());  // each still misses its own key
  for (size_t i = 1; i < ids.size(); i += 2) {
    EXPECT_EQ(idx.keyCreated("own/" + std::to_string(i)), std::vector<uint64_t>{ids[i]});
  }
  EXPECT_EQ(idx.indexedKeys(), 0u);
  EXPECT_EQ(idx.find(ids[0]), nullptr);
  EXPECT_THROW(idx.take(ids[0]), StoreError);
}

// ---- one connection, several threads ------------------------------------------------------

TEST(TcpStoreShared, ParkedWaitDoesNotHoldUpOtherThreads) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore store("127.0.0.1", server.port(), 5s);
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    store.wait({"go"}, kLongTimeout);
    woke = true;
  });
  // While that WAIT is parked on the shared connection, this thread's requests are
  // answered at once (a heartbeat must not wait behind a long rendezvous wait).
  std::this_thread::sleep_for(30ms);
  const auto start = Clock::now();
  for (int i = 0; i < 50; ++i) {
    store.setString("beat", std::to_string(i));
    EXPECT_EQ(store.getString("beat"), std::to_string(i));
  }
  EXPECT_LT(msSince(start), 2000);
  EXPECT_FALSE(woke.load());
  store.setString("go", "now");
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(server.stats().peakConnections, 1u);
}

TEST(TcpStoreShared, ManyThreadsOneConnectionAllGetTheirOwnReplies) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore store("127.0.0.1", server.port(), 5s);
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const std::string k = "t" + std::to_string(t) + "/" + std::to_string(i % 5);
        const std::string v = std::to_string(t * 100000 + i);
        store.setString(k, v);
        if (store.getString(k) != v) ++wrong;
        if (store.add("sum", 1) <= 0) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(store.getString("sum"), std::to_string(kThreads * kRounds));
  EXPECT_EQ(server.stats().peakConnections, 1u);
}

}  // namespace
}  // namespace tccl
