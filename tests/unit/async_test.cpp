// Asynchronous collectives and the bucketer, with ranks as threads (so that
// ThreadSanitizer sees the progress thread, the callbacks and the issuing threads).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "scoped_env.hpp"
#include "tccl/bucketer.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;
using namespace std::chrono_literals;

namespace {

constexpr int kCalls = 60;

void runRanks(int n, const std::function<void(Communicator&)>& fn) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, n);
        fn(comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(Async, ManyConcurrentAllreducesCompleteInIssueOrderWithExactResults) {
  runRanks(3, [](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::vector<int32_t>> bufs(kCalls);
    std::vector<WorkPtr> works;
    std::mutex mu;
    std::vector<int64_t> order;
    std::atomic<int> callbacks{0};
    for (int i = 0; i < kCalls; ++i) {
      const size_t count = static_cast<size_t>((i * 37) % 5000);  // includes 0
      bufs[static_cast<size_t>(i)].assign(count, 0);
      for (size_t k = 0; k < count; ++k)
        bufs[static_cast<size_t>(i)][k] = static_cast<int32_t>(k) + r * i;
      AllreduceOptions ao;
      ao.algorithm = i % 3 == 0 ? Algorithm::Naive : Algorithm::Ring;
      WorkPtr w =
          comm.allreduceAsync(std::span<int32_t>(bufs[static_cast<size_t>(i)]), ReduceOp::Sum, ao);
      w->onComplete([&, w](const Error* err) {
        EXPECT_EQ(err, nullptr);
        std::lock_guard<std::mutex> lk(mu);
        order.push_back(w->seq());
        ++callbacks;
      });
      works.push_back(w);
    }
    for (auto& w : works) w->wait();
    for (auto& w : works) EXPECT_TRUE(w->isCompleted());
    EXPECT_EQ(callbacks.load(), kCalls);
    // Completion (and callback) order is issue order.
    std::lock_guard<std::mutex> lk(mu);
    std::vector<int64_t> expected(kCalls);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(order, expected);
    for (int i = 0; i < kCalls; ++i) {
      const auto& b = bufs[static_cast<size_t>(i)];
      for (size_t k = 0; k < b.size(); ++k) {
        ASSERT_EQ(b[k], static_cast<int32_t>(3 * k) + 3 * i) << "call " << i << " index " << k;
      }
    }
  });
}

TEST(Async, BlockingCallAfterAsyncRunsInIssueOrder) {
  runRanks(2, [](Communicator& comm) {
    std::vector<float> big(1 << 18, 1.0f), small(16, 2.0f);
    WorkPtr w =
        comm.allreduceAsync(std::span<float>(big), ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
    comm.allreduce(std::span<float>(small), ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
    // The blocking call was issued second, so the async one completed before it returned.
    EXPECT_TRUE(w->isCompleted());
    EXPECT_EQ(small[15], 4.0f);
    EXPECT_EQ(big[12345], 2.0f);
    EXPECT_EQ(comm.lastCall().seq, 1);
    EXPECT_EQ(w->stats().seq, 0);
    EXPECT_EQ(w->stats().traffic.total().payloadSent, big.size() * sizeof(float));
  });
}

// A call issued to an idle queue and waited on at once is run by its waiter (no hand-off
// to the progress thread): its callback runs on the waiting thread. A grace of 50 us (the
// default until 2026-12-02; 1 ms now) was shorter than a sanitizer build's or a loaded
// machine's gap between issue and wait, so the test sets TCCL_ASYNC_GRACE_US to 10 s: then
// every call must be the waiter's, and none waits for the grace (the test would take 200 s).
TEST(Async, ACallWaitedOnAtOnceRunsOnTheWaitersThread) {
  tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", "10000000");
  const auto start = std::chrono::steady_clock::now();
  runRanks(2, [](Communicator& comm) {
    int onWaiter = 0;
    for (int i = 0; i < 20; ++i) {
      std::vector<int32_t> v(8, comm.rank() + i);
      std::thread::id ranOn;
      WorkPtr w = comm.allreduceAsync(std::span<int32_t>(v), ReduceOp::Sum);
      w->onComplete([&](const Error*) { ranOn = std::this_thread::get_id(); });
      w->wait();
      onWaiter += ranOn == std::this_thread::get_id() ? 1 : 0;
      for (int32_t x : v) ASSERT_EQ(x, 1 + 2 * i);
    }
    EXPECT_EQ(onWaiter, 20);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 9s);
}

// TCCL_ASYNC_GRACE_US=0: the progress thread may take a call at once, and a call nobody
// waits on is done without any wait; a value out of [0, 10^7] is refused at construction.
TEST(Async, TheGraceComesFromTheEnvironment) {
  {
    tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", "0");
    runRanks(2, [](Communicator& comm) {
      for (int i = 0; i < 10; ++i) {
        std::vector<int64_t> v(5, comm.rank() * 10 + i);
        WorkPtr w = comm.allreduceAsync(std::span<int64_t>(v), ReduceOp::Sum);
        const auto until = std::chrono::steady_clock::now() + 20s;
        while (!w->isCompleted() && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(100us);
        ASSERT_TRUE(w->isCompleted());
        for (int64_t x : v) ASSERT_EQ(x, 10 + 2 * i);
      }
    });
  }
  for (const char* bad : {"-1", "10000001", "5us"}) {
    tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", bad);
    auto store = std::make_shared<HashStore>();
    try {
      Communicator comm(store, 0, 1);
      ADD_FAILURE() << "TCCL_ASYNC_GRACE_US=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("TCCL_ASYNC_GRACE_US"), std::string::npos) << e.what();
    }
  }
}

// Nobody waits: the progress thread runs it once the grace is over.
TEST(Async, ACallNobodyWaitsOnCompletesOnItsOwn) {
  runRanks(2, [](Communicator& comm) {
    std::vector<float> v(1000);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k + comm.rank());
    WorkPtr w = comm.allreduceAsync(std::span<float>(v), ReduceOp::Sum);
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!w->isCompleted() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(w->isCompleted());
    for (size_t k = 0; k < v.size(); ++k) ASSERT_EQ(v[k], static_cast<float>(2 * k + 1));
  });
}

// Issues a call nobody waits on (at world 2) and checks that it is left to its waiter for
// the whole grace, then runs: it completes after 0.9 x grace and before grace + slack.
void expectLeftToItsGraceThenRun(Communicator& comm, std::chrono::milliseconds grace,
                                 std::chrono::milliseconds slack) {
  std::vector<int64_t> v(7, 5 * comm.rank() + 1);
  const auto issued = std::chrono::steady_clock::now();
  WorkPtr w = comm.allreduceAsync(std::span<int64_t>(v), ReduceOp::Sum);
  std::this_thread::sleep_for(grace / 3);
  const bool doneEarly = w->isCompleted();
  // Only a look taken inside this rank's grace says anything (a slow machine may
  // deschedule this thread past it); the call can't be done before this rank's grace.
  if (std::chrono::steady_clock::now() - issued < grace * 9 / 10) {
    EXPECT_FALSE(doneEarly);
  }
  const auto until = issued + 20s;
  while (!w->isCompleted() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(w->isCompleted());
  const auto took = std::chrono::steady_clock::now() - issued;
  EXPECT_GE(took, grace * 9 / 10);
  EXPECT_LT(took, grace + slack);
  for (int64_t x : v) ASSERT_EQ(x, 7);
}

// The grace timer is lazy: the calls waited on at once leave it armed for the first one's
// grace. A call nobody waits on, issued after that timer fired or while it is still
// armed for an earlier expiry, is still left to its waiter for its own whole grace, and
// then completes on its own: the progress thread arms the timer again when it fires early.
TEST(Async, TheLazyGraceTimerStillGivesEachCallItsGraceThenRunsIt) {
  constexpr auto kGrace = 300ms;
  tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", "300000");
  for (const auto pause : {50ms, 400ms}) {  // issued before the timer fires, and after
    runRanks(2, [&](Communicator& comm) {
      for (int i = 0; i < 10; ++i) {  // waited on at once: the first arms the timer
        std::vector<int32_t> v(4, comm.rank() + i);
        comm.allreduceAsync(std::span<int32_t>(v), ReduceOp::Sum)->wait();
        for (int32_t x : v) ASSERT_EQ(x, 1 + 2 * i);
      }
      std::this_thread::sleep_for(pause);
      // Taken when its grace ended, not when the progress thread next looked for want of
      // a timer (its 1 s linger: issue + 1.2 s here, had the timer not been armed again).
      SCOPED_TRACE("pause " + std::to_string(pause.count()) + " ms");
      expectLeftToItsGraceThenRun(comm, kGrace, 700ms);
    });
  }
}

// A waiter pushes the timer a grace on from its own start when it would fire within two
// gaps (runQueued). Here, with a 400 ms grace: a call nobody waits on first (the progress
// thread runs it at its grace's end, and so will look again by the end of its 1 s linger
// from then, not from its start); then two waited calls 200 ms apart: the first arms the
// timer for 400 ms, the second's waiter pushes it to 400 ms from its start. Then, at once,
// a call nobody waits on: it finds the timer armed for just before its own grace's end, so
// it arms nothing; the timer fires a moment early and the progress thread arms it again
// for the call, which starts about 400 ms after its issue. A timer pushed one grace too
// far would start it 800 ms after its issue (past the bound of 400 + 300 ms), and one
// left unpushed or pushed too little would wake the thread early, which still leaves the
// call its grace (the next test counts those wake-ups).
TEST(Async, AWaiterThatPushesTheTimerLeavesTheNextCallItsGraceAndItsStart) {
  constexpr auto kGrace = 400ms;
  tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", "400000");
  runRanks(2, [&](Communicator& comm) {
    {
      std::vector<int32_t> v(3, comm.rank() + 5);
      WorkPtr w = comm.allreduceAsync(std::span<int32_t>(v), ReduceOp::Sum);
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (!w->isCompleted() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(1ms);  // not waited on
      ASSERT_TRUE(w->isCompleted());
      w->wait();
      for (int32_t x : v) ASSERT_EQ(x, 11);
    }
    for (int i = 0; i < 2; ++i) {
      if (i == 1) std::this_thread::sleep_for(200ms);
      std::vector<int32_t> v(3, comm.rank() + i);
      comm.allreduceAsync(std::span<int32_t>(v), ReduceOp::Sum)->wait();
      for (int32_t x : v) ASSERT_EQ(x, 1 + 2 * i);
    }
    expectLeftToItsGraceThenRun(comm, kGrace, 300ms);
  });
}

// The voluntary context switches of this process's call-queue threads (named
// tccl-progress: progressLoop), summed: one per sleep, so one per wake-up.
int64_t progressThreadSleeps() {
  int64_t total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "tccl-progress") continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      constexpr std::string_view kKey = "voluntary_ctxt_switches:";
      if (line.rfind(kKey, 0) == 0) total += std::stoll(line.substr(kKey.size()));
    }
  }
  return total;
}

// A stream of calls waited on at once, 25 ms apart with a 60 ms grace (more than a quarter
// of the grace apart): each waiter pushes the timer a grace on, so it never fires and the
// progress threads sleep through the stream. Left alone, the timer fires once a grace or
// so after the last firing and wakes the threads again and again (7 wake-ups in all in a
// run here); pushed to an eighth of the grace ahead, more often still (11).
TEST(Async, AStreamOfWaitedCallsNeverWakesTheProgressThread) {
  tccl::testing::ScopedEnv grace("TCCL_ASYNC_GRACE_US", "60000");
  std::barrier sync(2);
  std::atomic<int64_t> before{-1}, after{-1};
  runRanks(2, [&](Communicator& comm) {
    auto call = [&](int i) {
      std::vector<int32_t> v(5, comm.rank() * 3 + i);
      comm.allreduceAsync(std::span<int32_t>(v), ReduceOp::Sum)->wait();
      for (int32_t x : v) ASSERT_EQ(x, 3 + 2 * i);
    };
    call(0);  // starts this rank's progress thread, which goes to sleep
    std::this_thread::sleep_for(20ms);
    sync.arrive_and_wait();
    if (comm.rank() == 0) before = progressThreadSleeps();
    sync.arrive_and_wait();
    for (int i = 1; i <= 24; ++i) {
      std::this_thread::sleep_for(25ms);
      call(i);
    }
    sync.arrive_and_wait();
    if (comm.rank() == 0) after = progressThreadSleeps();
  });
  ASSERT_GE(before.load(), 2);  // both threads found, and asleep
  // A slow machine may stretch one gap past the timer; the rule's failures wake a thread
  // at every grace or every call.
  EXPECT_LE(after.load() - before.load(), 2) << "progress-thread sleeps before " << before.load();
}

// Issued, then the communicator ends within the grace: the end runs it (the destructor
// drains the queue), and a wait afterwards, with no communicator to run it, returns.
TEST(Async, ACallIssuedJustBeforeTheEndCompletes) {
  auto store = std::make_shared<HashStore>();
  std::vector<WorkPtr> works(2);
  std::vector<std::vector<int64_t>> bufs(2, std::vector<int64_t>(33));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Communicator comm(store, r, 2);
      for (size_t k = 0; k < 33; ++k)
        bufs[static_cast<size_t>(r)][k] = static_cast<int64_t>(k) * (r + 1);
      works[static_cast<size_t>(r)] =
          comm.allreduceAsync(std::span<int64_t>(bufs[static_cast<size_t>(r)]), ReduceOp::Sum);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    works[static_cast<size_t>(r)]->wait();
    for (size_t k = 0; k < 33; ++k)
      ASSERT_EQ(bufs[static_cast<size_t>(r)][k], static_cast<int64_t>(3 * k));
  }
}

TEST(Async, IssuingFromTwoThreadsKeepsOneOrder) {
  // Each rank issues from two threads, handing off in a fixed order, so every rank
  // issues the same sequence; results must match their position in that sequence.
  runRanks(2, [](Communicator& comm) {
    std::vector<std::vector<int64_t>> bufs(20, std::vector<int64_t>(100));
    std::vector<WorkPtr> works(20);
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;
    auto issuer = [&](int parity) {
      for (int i = parity; i < 20; i += 2) {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return turn == i; });
        std::fill(bufs[static_cast<size_t>(i)].begin(), bufs[static_cast<size_t>(i)].end(), i);
        works[static_cast<size_t>(i)] =
            comm.allreduceAsync(std::span<int64_t>(bufs[static_cast<size_t>(i)]));
        ++turn;
        cv.notify_all();
      }
    };
    std::thread a(issuer, 0), b(issuer, 1);
    a.join();
    b.join();
    for (int i = 0; i < 20; ++i) {
      works[static_cast<size_t>(i)]->wait();
      EXPECT_EQ(bufs[static_cast<size_t>(i)][99], 2 * i);
      EXPECT_EQ(works[static_cast<size_t>(i)]->seq(), i);
    }
  });
}

TEST(Async, ErrorSurfacesAtWaitAndLaterWorkIsAborted) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  std::thread silent([&] {
    Communicator comm(store, 1, 2);
    while (!done) std::this_thread::sleep_for(1ms);
  });
  {
    Communicator comm(store, 0, 2);
    std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
    std::atomic<int> errorsSeen{0};
    WorkPtr w1 = comm.allreduceAsync(std::span<float>(a), ReduceOp::Sum, {Algorithm::Ring, 200ms});
    WorkPtr w2 = comm.allreduceAsync(std::span<float>(b), ReduceOp::Sum, {Algorithm::Ring, 200ms});
    w2->onComplete([&](const Error* e) {
      if (e != nullptr && e->kind() == ErrorKind::Aborted) ++errorsSeen;
    });
    try {
      w1->wait();
      ADD_FAILURE() << "no error";
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.peer(), 1);
      EXPECT_EQ(e.info().seq, 0);
    }
    EXPECT_THROW(w2->wait(), AbortedError);
    EXPECT_EQ(errorsSeen.load(), 1);
    EXPECT_NE(w1->exception(), nullptr);
  }
  done = true;
  silent.join();
}

TEST(Async, WaitWithTimeoutThrowsButTheCollectiveGoesOn) {
  auto store = std::make_shared<HashStore>();
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    Communicator comm(store, 1, 2);
    std::vector<double> v(10, 2.0);
    comm.allreduce(std::span<double>(v));
  });
  Communicator comm(store, 0, 2);
  std::vector<double> v(10, 1.0);
  WorkPtr w = comm.allreduceAsync(std::span<double>(v));
  EXPECT_FALSE(w->test());
  EXPECT_THROW(w->wait(20ms), TimeoutError);
  w->wait();
  EXPECT_EQ(v[9], 3.0);
  late.join();
}

// ---- bucketer --------------------------------------------------------------------

TEST(Bucketer, PacksInOrderUpToTheCapsAndUnpacksExactResults) {
  runRanks(2, [](Communicator& comm) {
    const int r = comm.rank();
    // Sizes in floats: 100 KiB-ish tensors against a 1 MiB first cap and 2 MiB cap.
    std::vector<size_t> sizes = {30000, 60000, 200000, 10, 0, 300000, 90000, 5000, 400000, 1};
    std::vector<std::vector<float>> grads;
    for (size_t s : sizes) grads.emplace_back(s, static_cast<float>(r + 1));
    BucketOptions bo;
    bo.firstCapBytes = 1 << 20;
    bo.capBytes = 2 << 20;
    bo.op = ReduceOp::Avg;
    Bucketer b(comm, bo);
    for (auto& g : grads) b.add(std::span<float>(g));
    b.finish();
    for (auto& g : grads) {
      for (float x : g) ASSERT_EQ(x, 1.5f);
    }
    // Bucket boundaries: 1 MiB first cap = 262144 floats.
    //   [30000, 60000] = 90000 floats; adding 200000 would pass 262144 -> launch.
    //   then cap 2 MiB = 524288 floats: [200000, 10, 300000] = 500010; +90000 passes -> launch
    //   [90000, 5000, 400000] = 495000; +1 fits -> [.., 1] = 495001, flushed by finish.
    const auto& buckets = b.buckets();
    ASSERT_EQ(buckets.size(), 3u);
    EXPECT_EQ(buckets[0].bytes, 90000u * 4);
    EXPECT_EQ(buckets[0].tensors, 2u);
    EXPECT_EQ(buckets[1].bytes, 500010u * 4);
    EXPECT_EQ(buckets[1].tensors, 3u);
    EXPECT_EQ(buckets[2].bytes, 495001u * 4);
    EXPECT_EQ(buckets[2].tensors, 4u);
  });
}

TEST(Bucketer, MixedDtypesGetTheirOwnBucketsAndLargeTensorsGoAlone) {
  runRanks(3, [](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> f1(1000, 1.0f + static_cast<float>(r)), f2(2000, 1.0f);
    std::vector<double> d1(500, 2.0 * r);
    std::vector<int64_t> big(1 << 16, r);  // 512 KiB >= cap: reduced in place, alone
    std::vector<int32_t> i1(7, r + 10);
    BucketOptions bo;
    bo.firstCapBytes = 64 << 10;
    bo.capBytes = 256 << 10;
    Bucketer b(comm, bo);
    b.add(std::span<float>(f1));
    b.add(std::span<double>(d1));
    b.add(std::span<int64_t>(big));
    b.add(std::span<float>(f2));
    b.add(std::span<int32_t>(i1));
    b.finish();
    EXPECT_EQ(f1[999], 6.0f);
    EXPECT_EQ(f2[0], 3.0f);
    EXPECT_EQ(d1[499], 6.0);
    EXPECT_EQ(big[12345], 3);
    EXPECT_EQ(i1[6], 33);
    int inPlace = 0;
    for (const auto& info : b.buckets()) {
      inPlace += info.inPlace;
      if (info.inPlace) {
        EXPECT_EQ(info.dtype, DataType::Int64);
      }
    }
    EXPECT_EQ(inPlace, 1);
    // float, double, int64 (in place), int32: four buckets, one dtype each.
    EXPECT_EQ(b.buckets().size(), 4u);
    // A second step reuses the bucketer.
    std::fill(f1.begin(), f1.end(), 1.0f);
    b.add(std::span<float>(f1));
    b.finish();
    EXPECT_EQ(f1[0], 3.0f);
    EXPECT_EQ(b.buckets().size(), 1u);
  });
}

TEST(Bucketer, ErrorsSurfaceAtFinish) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  std::thread silent([&] {
    Communicator comm(store, 1, 2);
    while (!done) std::this_thread::sleep_for(1ms);
  });
  {
    CommOptions co;
    co.timeout = 200ms;
    Communicator comm(store, 0, 2, co);
    std::vector<float> g(1000, 1.0f);
    Bucketer b(comm);
    b.add(std::span<float>(g));
    EXPECT_THROW(b.finish(), TimeoutError);
  }
  done = true;
  silent.join();
}

}  // namespace
