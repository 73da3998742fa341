// The failure watch's store load and its census (docs/errors.md, "Heartbeats"), with
// ranks as threads over one in-process store that counts every request: in steady state
// a rank makes at most one store request per period and no write; a collective that
// every rank is stuck in costs O(N) requests in all, not O(N) per rank and period; and a
// rank that stops answering the census is named as stopped, one that answers as alive.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "scoped_env.hpp"
#include "tccl/tccl.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;

struct Counts {
  std::atomic<int64_t> reads{0};   // get, check, wait, multiGet
  std::atomic<int64_t> writes{0};  // set, add, erase, multiSet, compareSet
  int64_t total() const { return reads.load() + writes.load(); }
};

// One rank's view of the shared store: counts its requests into `counts`; while frozen,
// every request fails as an unreachable store would (the rank stops answering).
class CountingStore : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, Counts* counts)
      : inner_(std::move(inner)), counts_(counts) {}
  std::atomic<bool> frozen{false};

  void set(const std::string& k, const Bytes& v) override {
    write();
    inner_->set(k, v);
  }
  Bytes get(const std::string& k) override {
    read();
    return inner_->get(k);
  }
  int64_t add(const std::string& k, int64_t d) override {
    write();
    return inner_->add(k, d);
  }
  bool check(const std::vector<std::string>& ks) override {
    read();
    return inner_->check(ks);
  }
  void wait(const std::vector<std::string>& ks, std::chrono::milliseconds t) override {
    read();
    inner_->wait(ks, t);
  }
  bool erase(const std::string& k) override {
    write();
    return inner_->erase(k);
  }
  std::vector<Bytes> multiGet(const std::vector<std::string>& ks,
                              std::chrono::milliseconds t) override {
    read();
    return inner_->multiGet(ks, t);
  }
  void multiSet(const std::vector<std::string>& ks, const std::vector<Bytes>& vs) override {
    write();
    inner_->multiSet(ks, vs);
  }
  Bytes compareSet(const std::string& k, const Bytes& e, const Bytes& d) override {
    write();
    return inner_->compareSet(k, e, d);
  }
  using Store::multiGet;
  using Store::wait;

 private:
  void read() {
    gate();
    ++counts_->reads;
  }
  void write() {
    gate();
    ++counts_->writes;
  }
  void gate() {
    if (frozen.load()) throw std::runtime_error("store frozen by the test");
  }
  std::shared_ptr<Store> inner_;
  Counts* counts_;
};

constexpr int kPeriodMs = 50;

// n ranks on threads, each with its own communicator (and so its own watch thread, as
// processes have) over its own CountingStore; fn(rank, comm, stores) on each.
void runCounted(int n, Counts& counts, std::vector<std::shared_ptr<CountingStore>>& stores,
                const std::function<void(int, Communicator&)>& fn) {
  auto shared = std::make_shared<HashStore>();
  stores.clear();
  for (int r = 0; r < n; ++r) stores.push_back(std::make_shared<CountingStore>(shared, &counts));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommOptions o;
        o.timeout = 20s;
        Communicator comm(stores[static_cast<size_t>(r)], r, n, o);
        fn(r, comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// TCCL_HB_LOAD_SIZES="8 64" measures other worlds (docs/PERFORMANCE.md); CI's: 2, 3, 8.
std::vector<int> worldSizes() {
  std::vector<int> out;
  if (const char* env = std::getenv("TCCL_HB_LOAD_SIZES")) {
    std::istringstream is(env);
    for (int n; is >> n;) out.push_back(n);
  }
  if (out.empty()) out = {2, 3, 8};
  return out;
}

void allreduceChecked(Communicator& comm, const CollectiveOptions& o = {}) {
  const int n = comm.size();
  std::vector<int64_t> v(3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = comm.rank() * 10 + static_cast<int64_t>(i);
  comm.allreduce(std::span<int64_t>(v), ReduceOp::Sum, o);
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(v[i], 10 * n * (n - 1) / 2 + n * static_cast<int64_t>(i)) << "index " << i;
}

// Steady state, between calls: before this protocol every rank wrote its record and
// checked abort/cause every period (2 requests, 1 a write); now one CHECK of the
// family's event log per process and period, and nothing written.
TEST(HeartbeatLoad, SteadyStateIsAtMostOneReadPerRankPerPeriodAndNoWrite) {
  testing::ScopedEnv hb("TCCL_HEARTBEAT_MS", std::to_string(kPeriodMs).c_str());
  for (int n : worldSizes()) {
    Counts counts;
    std::vector<std::shared_ptr<CountingStore>> stores;
    std::barrier sync(n);
    int64_t reads0 = 0, writes0 = 0, reads1 = 0, writes1 = 0;
    std::chrono::steady_clock::time_point t0, t1;
    runCounted(n, counts, stores, [&](int r, Communicator& comm) {
      allreduceChecked(comm);
      sync.arrive_and_wait();
      if (r == 0) {
        reads0 = counts.reads, writes0 = counts.writes;
        t0 = std::chrono::steady_clock::now();
      }
      sync.arrive_and_wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(12 * kPeriodMs));
      sync.arrive_and_wait();
      if (r == 0) {
        reads1 = counts.reads, writes1 = counts.writes;
        t1 = std::chrono::steady_clock::now();
      }
      sync.arrive_and_wait();
    });
    const double periods = std::chrono::duration<double, std::milli>(t1 - t0).count() / kPeriodMs;
    const int64_t reads = reads1 - reads0;
    std::printf(
        "steady state, n=%d: %.2f requests per rank per period (%lld reads, %lld writes "
        "over %.1f periods)\n",
        n, static_cast<double>(reads + writes1 - writes0) / (n * periods),
        static_cast<long long>(reads), static_cast<long long>(writes1 - writes0), periods);
    EXPECT_EQ(writes1 - writes0, 0) << "n=" << n;
    // One per rank and period; a rank's watch may look once more at each end.
    EXPECT_LE(reads, static_cast<int64_t>(n * (periods + 2))) << "n=" << n;
    // And it does look: the log is read (a watch that never looks would learn nothing).
    EXPECT_GE(reads, static_cast<int64_t>(n * periods / 3)) << "n=" << n;
  }
}

// Every rank but 0 sits inside all-reduce #1 while rank 0 "computes" for 12 periods:
// the old comparison read every record every period (2(N-1) requests per rank and
// period: ~1,200 here); now each stuck rank writes its record and counts in once, and
// the ranks whose count is a majority or all but one compare once.
TEST(HeartbeatLoad, AStuckCollectiveCostsLinearlyManyRequestsNotPerPeriod) {
  testing::ScopedEnv hb("TCCL_HEARTBEAT_MS", std::to_string(kPeriodMs).c_str());
  const int n = 8;
  const int periods = 12;
  Counts counts;
  std::vector<std::shared_ptr<CountingStore>> stores;
  std::barrier sync(n);
  int64_t before = 0, after = 0;
  CollectiveOptions ring;
  ring.algorithm = Algorithm::Ring;
  runCounted(n, counts, stores, [&](int r, Communicator& comm) {
    allreduceChecked(comm, ring);
    sync.arrive_and_wait();
    if (r == 0) {
      before = counts.total();
      std::this_thread::sleep_for(std::chrono::milliseconds(periods * kPeriodMs));
      after = counts.total();
    }
    allreduceChecked(comm, ring);
  });
  const int64_t used = after - before;
  std::printf("stuck: %lld requests in %d periods with %d of %d ranks waiting\n",
              static_cast<long long>(used), periods, n - 1, n);
  const int64_t steady = n * (periods + 2);
  EXPECT_LE(used, steady + 2 * (n - 1) + 4 * n) << "requests while " << n - 1 << " ranks wait";
}

// A census: ranks 0 and 1 time out in all-reduce #1 waiting on rank 2, which is not in
// it. Rank 2 stops answering (its store fails, as a stopped process's watch would not
// run): "its heartbeat stopped". Rank 2 alive and answering: "alive but has not entered".
TEST(HeartbeatCensus, NamesARankThatStopsAnsweringAndOneThatIsAliveButBehind) {
  // Periods of 100 ms (the call's tenth): the decider waits 350 ms for the answers, a
  // margin of 250 ms over one look for a loaded machine.
  testing::ScopedEnv hb("TCCL_HEARTBEAT_MS", "100");
  for (bool answers : {false, true}) {
    SCOPED_TRACE(answers ? "rank 2 answers" : "rank 2 stopped");
    const int n = 3;
    Counts counts;
    std::vector<std::shared_ptr<CountingStore>> stores;
    std::barrier sync(n);
    std::vector<std::string> seen(n);
    std::vector<int> culprit(n, -2);
    std::atomic<int> reported{0};
    CollectiveOptions o;
    o.algorithm = Algorithm::Ring;
    o.timeout = 1000ms;
    runCounted(n, counts, stores, [&](int r, Communicator& comm) {
      allreduceChecked(comm, o);
      sync.arrive_and_wait();
      if (r == 2) {
        if (!answers) stores[2]->frozen = true;
        while (reported.load() < 2) std::this_thread::sleep_for(10ms);
        stores[2]->frozen = false;
        return;  // never enters #1; its communicator ends here
      }
      try {
        allreduceChecked(comm, o);
        seen[static_cast<size_t>(r)] = "no error";
      } catch (const Error& e) {
        seen[static_cast<size_t>(r)] = e.what();
        culprit[static_cast<size_t>(r)] = e.info().culprit;
      }
      ++reported;
    });
    const std::string expected = answers ? "rank 2 is alive but has not entered collective #1"
                                         : "rank 2 is not responding: its heartbeat stopped";
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(culprit[static_cast<size_t>(r)], 2) << seen[static_cast<size_t>(r)];
      EXPECT_NE(seen[static_cast<size_t>(r)].find(expected), std::string::npos)
          << seen[static_cast<size_t>(r)];
      EXPECT_NE(seen[static_cast<size_t>(r)].find("Timeout"), std::string::npos)
          << seen[static_cast<size_t>(r)];
    }
  }
}

}  // namespace
}  // namespace tccl
