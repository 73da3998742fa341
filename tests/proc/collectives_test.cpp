// The collective suite over real processes and sockets: reduce-scatter, all-gather,
// broadcast (tree and chain), reduce, barrier, all-to-all, gather, scatter, send/recv,
// and their asynchronous forms (tests/proc/coll_worker.cpp does the checking).
#include <gtest/gtest.h>

#include <sstream>

#include "harness.hpp"

using namespace tccl;
using namespace tccl::testing;
using namespace std::chrono_literals;

namespace {

class CollectiveSuite : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveSuite, EveryCollectiveDtypeCountRootAndPlacementIsExactWithExactBytes) {
  JobSpec spec;
  spec.worker = TCCL_COLL_WORKER_PATH;
  spec.world = GetParam();
  spec.args = {"suite"};
  spec.deadline = 240s;
  Job job = runJob(spec);
  expectAllOk(job);
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollectiveSuite, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& p) { return "world" + std::to_string(p.param); });

TEST(Collectives, ManySegmentsPerBlock) {
  // 64-byte segments: a 4099-element block is dozens of messages per step.
  JobSpec spec;
  spec.worker = TCCL_COLL_WORKER_PATH;
  spec.world = 4;
  spec.args = {"suite", "N+1,4099"};
  spec.extraEnv = {{"TCCL_SEGMENT_BYTES", "64"}};
  spec.deadline = 240s;
  expectAllOk(runJob(spec));
}

TEST(Collectives, BarrierReleasesNobodyBeforeEveryoneHasEntered) {
  JobSpec spec;
  spec.worker = TCCL_COLL_WORKER_PATH;
  spec.world = 5;
  spec.args = {"barrier"};
  std::vector<std::string> times;
  spec.whileRunning = [&](TcpStore& store) {
    for (int r = 0; r < 5; ++r) {
      const std::string key = "coll/barrier/" + std::to_string(r);
      store.wait({key}, 60s);
      times.push_back(store.getString(key));
    }
  };
  Job job = runJob(spec);
  expectAllOk(job);
  ASSERT_EQ(times.size(), 5u);
  double lastEntry = 0, firstExit = 1e300;
  for (const auto& t : times) {
    std::istringstream is(t);
    double in = 0, out = 0;
    is >> in >> out;
    lastEntry = std::max(lastEntry, in);
    firstExit = std::min(firstExit, out);
  }
  EXPECT_LE(lastEntry, firstExit) << "a rank left the barrier before the last one entered";
}

TEST(Collectives, AsynchronousCollectivesRunInIssueOrder) {
  JobSpec spec;
  spec.worker = TCCL_COLL_WORKER_PATH;
  spec.world = 3;
  spec.args = {"async"};
  expectAllOk(runJob(spec));
}

}  // namespace
