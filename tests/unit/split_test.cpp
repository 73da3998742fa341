// Communicator::split (MPI_Comm_split semantics) with ranks as threads over one HashStore:
// the membership and order against an independent count, exact collectives on the
// children, nested splits, parent and child driven at once from two threads, a bad color,
// a failure in a child naming child, parent and world ranks (collectives and p2p), shrink after
// split and split after shrink. (Processes and the torch backend: tests/python/test_split.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scoped_env.hpp"
#include "tccl/tccl.hpp"
#include "thread_ranks.hpp"

using namespace tccl;
using namespace std::chrono_literals;

namespace {

// Runs fn(comm) on n threads, each with its own root Communicator over a fresh store.
void runRanks(int n, const std::function<void(Communicator&)>& fn, CommOptions opts = {}) {
  tccl::testing::runRanks(n, std::make_shared<HashStore>(), fn, opts);
}

// A color and key for every rank of a world of n.
struct Scheme {
  const char* name;
  std::function<int(int r, int n)> color;
  std::function<int(int r, int n)> key;
};

std::vector<Scheme> schemes() {
  return {
      {"one color, key 0", [](int, int) { return 0; }, [](int, int) { return 0; }},
      {"parity, reversed", [](int r, int) { return r % 2; }, [](int r, int) { return -r; }},
      // Ties in key, broken by the parent rank; colors need not be dense.
      {"mod 3, tied keys", [](int r, int) { return 7 * (r % 3); },
       [](int r, int) { return r / 2; }},
      {"last rank left out",
       [](int r, int n) { return n > 1 && r == n - 1 ? Communicator::kNoColor : 0; },
       [](int r, int n) { return (r * 5) % n; }},
      {"every rank alone", [](int r, int) { return r; }, [](int, int) { return 0; }},
  };
}

// Expected child rank of r: the members of its color before it in (key, rank) order,
// counted directly rather than sorted; -1 when r passes no color.
int expectedChildRank(const Scheme& s, int r, int n) {
  if (s.color(r, n) == Communicator::kNoColor) return -1;
  int before = 0;
  for (int q = 0; q < n; ++q) {
    if (s.color(q, n) != s.color(r, n)) continue;
    const int kq = s.key(q, n), kr = s.key(r, n);
    before += (kq < kr || (kq == kr && q < r)) ? 1 : 0;
  }
  return before;
}

int expectedChildSize(const Scheme& s, int r, int n) {
  int size = 0;
  for (int q = 0; q < n; ++q) size += s.color(q, n) == s.color(r, n) ? 1 : 0;
  return size;
}

}  // namespace

TEST(Split, ColorsAndKeysOverWorldsOneToEight) {
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE("world " + std::to_string(n));
    runRanks(n, [n](Communicator& comm) {
      const int r = comm.rank();
      for (const Scheme& s : schemes()) {
        SCOPED_TRACE(s.name);
        std::optional<Communicator> child = comm.split(s.color(r, n), s.key(r, n));
        const int want = expectedChildRank(s, r, n);
        if (want < 0) {
          EXPECT_FALSE(child.has_value());
          continue;
        }
        ASSERT_TRUE(child.has_value());
        EXPECT_EQ(child->rank(), want);
        ASSERT_EQ(child->size(), expectedChildSize(s, r, n));
        EXPECT_EQ(child->parentRanks()[static_cast<size_t>(child->rank())], r);
        EXPECT_EQ(child->worldRanks(), child->parentRanks());  // the parent is the world
        // Every member reports its parent rank: the gathered list is the membership in
        // child order, each entry's own expected child rank its index.
        int64_t mine = r;
        std::vector<int64_t> got(static_cast<size_t>(child->size()), -1);
        child->allGather(&mine, got.data(), 1, DataType::Int64);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i], child->parentRanks()[i]) << i;
          EXPECT_EQ(expectedChildRank(s, static_cast<int>(got[i]), n), static_cast<int>(i));
          EXPECT_EQ(s.color(static_cast<int>(got[i]), n), s.color(r, n));
        }
        // Exact data: sum over members of (parent rank + 1) * (index + 1).
        std::vector<int64_t> v(5);
        for (size_t i = 0; i < v.size(); ++i) v[i] = (r + 1) * static_cast<int64_t>(i + 1);
        child->allreduce(std::span<int64_t>(v));
        int64_t members = 0;
        for (int64_t p : got) members += p + 1;
        for (size_t i = 0; i < v.size(); ++i)
          EXPECT_EQ(v[i], members * static_cast<int64_t>(i + 1));
        // One listener in this "process" (this thread's family): the child is attached.
        EXPECT_EQ(child->listenAddress(), comm.listenAddress());
        EXPECT_EQ(comm.attachedCommunicators(), 1u);
      }
      EXPECT_EQ(comm.attachedCommunicators(), 0u);  // the children are gone
      // The parent is untouched: its own order goes on.
      int64_t x = r;
      comm.allreduce(&x, 1, DataType::Int64, ReduceOp::Sum);
      EXPECT_EQ(x, int64_t{n} * (n - 1) / 2);
    });
  }
}

TEST(Split, NestedSplitsNameParentAndWorldRanks) {
  runRanks(8, [](Communicator& world) {
    const int w = world.rank();
    // Halves by parity, reversed; then pairs within each half.
    auto half = world.split(w % 2, -w);
    ASSERT_TRUE(half);
    auto pair = half->split(half->rank() / 2, half->rank());
    ASSERT_TRUE(pair);
    ASSERT_EQ(pair->size(), 2);
    // World ranks of a half: odd or even, descending. A pair: two neighbours there.
    const std::vector<int> halfWorld =
        w % 2 ? std::vector<int>{7, 5, 3, 1} : std::vector<int>{6, 4, 2, 0};
    EXPECT_EQ(half->worldRanks(), halfWorld);
    EXPECT_EQ(pair->worldRanks()[static_cast<size_t>(pair->rank())], w);
    EXPECT_EQ(pair->parentRanks()[static_cast<size_t>(pair->rank())], half->rank());
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(pair->worldRanks()[i], halfWorld[static_cast<size_t>(pair->parentRanks()[i])]);
    }
    int64_t x = w;
    pair->allreduce(&x, 1, DataType::Int64, ReduceOp::Sum);
    EXPECT_EQ(x, pair->worldRanks()[0] + pair->worldRanks()[1]);
    EXPECT_EQ(world.attachedCommunicators(), 2u);
    EXPECT_EQ(pair->listenAddress(), world.listenAddress());
  });
}

TEST(Split, ParentAndChildCollectivesInterleavedFromTwoThreads) {
  const int n = 4;
  runRanks(n, [](Communicator& comm) {
    const int r = comm.rank();
    auto child = comm.split(r % 2, r);
    ASSERT_TRUE(child);
    const int iters = 40;
    std::atomic<int> bad{0};
    // The child's thread uses blocking and asynchronous calls; the parent's blocking ones.
    // Ranks interleave the two orders differently (scheduling): each keeps its own.
    std::thread childThread([&] {
      for (int i = 0; i < iters; ++i) {
        std::vector<int32_t> v(257, r + i);
        if (i % 3 == 0) {
          child->allreduceAsync(v.data(), v.size(), DataType::Int32, ReduceOp::Sum)->wait();
        } else {
          child->allreduce(std::span<int32_t>(v));
        }
        // Members r%2 and r%2+2: (a + i) + (a + 2 + i).
        const int32_t want = 2 * (r % 2) + 2 + 2 * i;
        for (int32_t e : v) bad += e != want;
      }
    });
    for (int i = 0; i < iters; ++i) {
      std::vector<int64_t> v(1000, r * 1000 + i);
      comm.allreduce(std::span<int64_t>(v), ReduceOp::Max);
      for (int64_t e : v) bad += e != (n - 1) * 1000 + i;
    }
    childThread.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(comm.sequence(), iters + 1);  // the split's all-gather, then ours
    EXPECT_EQ(child->sequence(), iters);
  });
}

TEST(Split, BadColorIsAnErrorOnEveryRankNamingTheRank) {
  runRanks(3, [](Communicator& comm) {
    const int r = comm.rank();
    try {
      comm.split(r == 1 ? -5 : 0, 0);
      ADD_FAILURE() << "split accepted color -5";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 passed color -5"), std::string::npos)
          << e.what();
    }
    // The parent stays usable, and a later split works.
    auto child = comm.split(0, -r);
    ASSERT_TRUE(child);
    EXPECT_EQ(child->rank(), 2 - r);
  });
}

TEST(Split, FailureInAChildNamesChildParentAndWorldRanks) {
  // World 6; the child of the odd ranks, reversed: child rank 0 = world 5, 1 = 3, 2 = 1.
  // World rank 3 (child rank 1) aborts its child; the others' next call fails naming it
  // in all three numberings. The world communicator is unaffected.
  CommOptions opts;
  opts.timeout = 20s;
  runRanks(
      6,
      [](Communicator& world) {
        const int w = world.rank();
        auto child = world.split(w % 2 == 1 ? 0 : Communicator::kNoColor, -w);
        if (child) {
          if (w == 3) {
            child->abort("test: world rank 3 gives up");
          } else {
            int64_t x = 1;
            try {
              child->allreduce(&x, 1, DataType::Int64, ReduceOp::Sum);
              ADD_FAILURE() << "the child's all-reduce succeeded";
            } catch (const Error& e) {
              const std::string what = e.what();
              EXPECT_EQ(e.info().culprit, 1) << what;
              EXPECT_EQ(e.info().culpritAlso.parent, 3) << what;
              EXPECT_EQ(e.info().culpritAlso.world, 3) << what;
              EXPECT_EQ(e.info().rankAlso.world, w) << what;
              EXPECT_NE(what.find("rank 1 (parent rank 3, world rank 3)"), std::string::npos)
                  << what;
            }
          }
        }
        int64_t y = w;
        world.allreduce(&y, 1, DataType::Int64, ReduceOp::Sum);
        EXPECT_EQ(y, 15);
      },
      opts);
}

TEST(Split, PointToPointErrorsOnAChildNameEveryNumbering) {
  // World 4; the child of the odd ranks, reversed: child rank 0 = world 3, 1 = world 1.
  // Child rank 0 waits for a message child rank 1 never sends: the timeout names the peer
  // as child rank 1, parent rank 1, world rank 1, and this rank as world rank 3. A send to
  // a rank outside the child is an argument error naming this rank in every numbering.
  runRanks(4, [](Communicator& world) {
    const int w = world.rank();
    auto child = world.split(w % 2 == 1 ? 0 : Communicator::kNoColor, -w);
    if (child && child->rank() == 0) {
      int32_t x = 0;
      CollectiveOptions o;
      o.timeout = 400ms;
      try {
        child->recv(&x, 1, DataType::Int32, 1, 7, o);
        ADD_FAILURE() << "a receive nobody sends to completed";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::Timeout) << what;
        EXPECT_EQ(e.info().peer, 1) << what;
        EXPECT_EQ(e.info().peerAlso.parent, 1) << what;
        EXPECT_EQ(e.info().peerAlso.world, 1) << what;
        EXPECT_EQ(e.info().rankAlso.parent, 3) << what;
        EXPECT_EQ(e.info().rankAlso.world, 3) << what;
        EXPECT_NE(what.find("rank 0 (parent rank 3, world rank 3)"), std::string::npos) << what;
        EXPECT_NE(what.find("rank 1 (parent rank 1, world rank 1)"), std::string::npos) << what;
      }
      try {
        child->send(&x, 1, DataType::Int32, 2, 0);
        ADD_FAILURE() << "a send to child rank 2 of 2 was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        EXPECT_EQ(e.info().rankAlso.world, 3) << e.what();
        EXPECT_NE(std::string(e.what()).find("(parent rank 3, world rank 3)"), std::string::npos)
            << e.what();
      }
    }
    world.barrier();  // child rank 1 stays until the timeout has been seen
  });
}

TEST(Split, ShrinkAfterSplitAndSplitAfterShrink) {
  CommOptions opts;
  opts.timeout = 20s;
  runRanks(
      5,
      [](Communicator& world) {
        const int w = world.rank();
        // Child of world ranks 1..4 (rank 0 left out), in world order.
        auto child = world.split(w == 0 ? Communicator::kNoColor : 0, w);
        if (!child) return;
        if (w == 2) {  // child rank 1
          child->abort("test: world rank 2 leaves the child");
          return;
        }
        int64_t x = 1;
        EXPECT_THROW(child->allreduce(&x, 1, DataType::Int64, ReduceOp::Sum), Error);
        Communicator shrunk = child->shrink(10s);
        ASSERT_EQ(shrunk.size(), 3);
        const std::vector<int> parents{0, 2, 3}, worlds{1, 3, 4};
        EXPECT_EQ(shrunk.parentRanks(), parents);
        EXPECT_EQ(shrunk.worldRanks(), worlds);
        EXPECT_EQ(shrunk.listenAddress(), world.listenAddress());
        int64_t y = w;
        shrunk.allreduce(&y, 1, DataType::Int64, ReduceOp::Sum);
        EXPECT_EQ(y, 1 + 3 + 4);
        // Split the shrunk one: world 1 alone, world 3 and 4 together, reversed.
        auto again = shrunk.split(w == 1 ? 0 : 1, -w);
        ASSERT_TRUE(again);
        const std::vector<int> want = w == 1 ? std::vector<int>{1} : std::vector<int>{4, 3};
        EXPECT_EQ(again->worldRanks(), want);
        int64_t z = w * 10;
        again->allreduce(&z, 1, DataType::Int64, ReduceOp::Sum);
        EXPECT_EQ(z, w == 1 ? 10 : 70);
      },
      opts);
}

TEST(Split, ErrorFormatNamesOtherNumberings) {
  ErrorInfo i;
  i.kind = ErrorKind::PeerClosed;
  i.rank = 0;
  i.rankAlso = {2, 6};
  i.peer = 1;
  i.peerAlso = {4, 9};
  i.message = "gone";
  EXPECT_EQ(Error::format(i),
            "[rank 0 (parent rank 2, world rank 6)] PeerClosed with rank 1 (parent rank 4, world "
            "rank 9): gone");
}

TEST(Split, CreateGroupOverlappingGroupsInGivenOrder) {
  runRanks(5, [](Communicator& world) {
    const int w = world.rank();
    // Only members call in, as torch's new_group does; rank 2 is in both groups and
    // drives them from two threads at once.
    const std::vector<int> a{4, 0, 2}, b{1, 2, 3};
    auto inA = [&] { return world.createGroup(a, "a"); };
    auto inB = [&] { return world.createGroup(b, "b"); };
    std::optional<Communicator> ga, gb;
    if (w != 1 && w != 3) ga = inA();
    if (w >= 1 && w <= 3) gb = inB();
    EXPECT_EQ(ga.has_value(), w == 0 || w == 2 || w == 4);
    EXPECT_EQ(gb.has_value(), w >= 1 && w <= 3);
    auto run = [w](Communicator& g, const std::vector<int>& members) {
      EXPECT_EQ(g.parentRanks(), members);
      EXPECT_EQ(members[static_cast<size_t>(g.rank())], w);
      for (int i = 0; i < 20; ++i) {
        std::vector<int64_t> v(3, w * 100 + i);
        g.allreduce(std::span<int64_t>(v));
        int64_t want = 0;
        for (int m : members) want += m * 100 + i;
        for (int64_t e : v) EXPECT_EQ(e, want);
      }
    };
    std::thread t;
    if (ga) t = std::thread([&] { run(*ga, a); });
    if (gb) run(*gb, b);
    if (t.joinable()) t.join();
    // A non-member's call returns at once; bad lists are refused.
    if (w == 1) {
      EXPECT_FALSE(world.createGroup({0, 2}, "c").has_value());
    }
    EXPECT_THROW(world.createGroup({0, 0}, "d"), InvalidArgumentError);
    EXPECT_THROW(world.createGroup({0, 5}, "e"), InvalidArgumentError);
    EXPECT_THROW(world.createGroup({}, "f"), InvalidArgumentError);
  });
}

// The measurement of docs/PERFORMANCE.md, "Split cost" (skipped unless TCCL_SPLIT_BENCH=1:
// CI does not time things): ranks as threads; per repetition, interleaved, the time the
// slowest rank takes to make a child with split (one color for all), with createGroup (all
// ranks), a fresh communicator instead, and the 16-byte all-gather split runs; then each
// child's first barrier (connections are lazy in all three). Creation is timed apart from
// destruction. Medians over the repetitions.
TEST(Split, SplitCost) {
  if (std::getenv("TCCL_SPLIT_BENCH") == nullptr) GTEST_SKIP() << "set TCCL_SPLIT_BENCH=1";
  const int reps = 7;
  for (int n : {8, 64}) {
    const char* names[] = {"split",         "createGroup",         "fresh",        "allgather 16 B",
                           "split barrier", "createGroup barrier", "fresh barrier"};
    std::vector<std::vector<double>> ms(7);
    runRanks(n, [&](Communicator& world) {
      auto timed = [&](size_t slot, const std::function<void()>& f) {
        world.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        f();
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
        world.allreduce(&t, 1, DataType::Float64, ReduceOp::Max);
        if (world.rank() == 0) ms[slot].push_back(t);
      };
      std::vector<int> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      for (int rep = 0; rep < reps; ++rep) {
        std::optional<Communicator> a, b, c;
        timed(0, [&] { a = world.split(0, world.rank()); });
        timed(1, [&] { b = world.createGroup(all, "bench" + std::to_string(rep)); });
        CommOptions o;
        o.name = "fresh" + std::to_string(rep);
        timed(2, [&] { c.emplace(world.store(), world.rank(), n, o); });
        int64_t mine[2] = {0, world.rank()};
        std::vector<int64_t> got(2 * static_cast<size_t>(n));
        timed(3, [&] { world.allGather(mine, got.data(), 2, DataType::Int64); });
        timed(4, [&] { a->barrier(); });
        timed(5, [&] { b->barrier(); });
        timed(6, [&] { c->barrier(); });
      }
    });
    std::printf("split cost, world %d (median of %d, slowest rank, ms):", n, reps);
    for (size_t k = 0; k < ms.size(); ++k) {
      std::sort(ms[k].begin(), ms[k].end());
      std::printf(" %s %.2f%s", names[k], ms[k][ms[k].size() / 2], k + 1 < ms.size() ? " |" : "\n");
    }
  }
}

TEST(Split, PointToPointOnAChildDialsThroughTheSharedListener) {
  // World 6, children {0,2,4} and {1,3,5}: every child rank sends to every other, both
  // directions at once (crossed p2p dials), with tag = sender's child rank.
  runRanks(6, [](Communicator& world) {
    const int w = world.rank();
    auto child = world.split(w % 2, w);
    ASSERT_TRUE(child);
    const int r = child->rank(), n = child->size();
    std::vector<std::vector<int32_t>> in(static_cast<size_t>(n), std::vector<int32_t>(33, -1));
    std::vector<int32_t> out(33);
    std::vector<WorkPtr> works;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      works.push_back(
          child->recvAsync(in[static_cast<size_t>(p)].data(), 33, DataType::Int32, p, p));
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = w * 1000 + static_cast<int32_t>(i);
    for (int p = 0; p < n; ++p) {
      if (p != r) works.push_back(child->sendAsync(out.data(), 33, DataType::Int32, p, r));
    }
    for (auto& wk : works) wk->wait();
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const int from = child->worldRanks()[static_cast<size_t>(p)];
      for (size_t i = 0; i < 33; ++i) {
        EXPECT_EQ(in[static_cast<size_t>(p)][i], from * 1000 + static_cast<int32_t>(i));
      }
    }
    EXPECT_EQ(child->listenAddress(), world.listenAddress());
  });
}

TEST(Split, AuthenticatedHandshakesOfAChildRunThroughTheHub) {
  // With a job key every child connection takes the challenge and proof, which the hub
  // hands to the child after reading the Hello (the proof arrives later).
  tccl::testing::ScopedEnv key("TCCL_AUTH_KEY",
                               "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  runRanks(4, [](Communicator& world) {
    const int w = world.rank();
    auto child = world.split(0, -w);
    ASSERT_TRUE(child);
    std::vector<int64_t> v(100, w);
    child->allreduce(std::span<int64_t>(v));
    for (int64_t e : v) EXPECT_EQ(e, 6);
    int64_t x = 1;
    child->send(&x, 1, DataType::Int64, (child->rank() + 1) % 4, 7);
    child->recv(&x, 1, DataType::Int64, (child->rank() + 3) % 4, 7);
    EXPECT_EQ(x, 1);
  });
}
