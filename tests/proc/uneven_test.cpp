// The uneven collectives over real processes and sockets (tests/proc/uneven_worker.cpp
// does the checking): exact data and exact payload bytes on worlds 1-8, and counts that
// disagree between ranks failing every rank with a Mismatch that names them, well
// before the deadline.
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace tccl;
using namespace tccl::testing;
using namespace std::chrono_literals;

namespace {

class UnevenSuite : public ::testing::TestWithParam<int> {};

TEST_P(UnevenSuite, EveryUnevenCollectiveIsExactWithExactBytes) {
  JobSpec spec;
  spec.worker = TCCL_UNEVEN_WORKER_PATH;
  spec.world = GetParam();
  spec.args = {"grid"};
  spec.deadline = 240s;
  // Small segments: blocks of a few thousand elements are many messages.
  spec.extraEnv = {{"TCCL_SEGMENT_BYTES", "4096"}};
  expectAllOk(runJob(spec));
}

INSTANTIATE_TEST_SUITE_P(Worlds, UnevenSuite, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& p) { return "world" + std::to_string(p.param); });

// Every rank fails (none hangs, none succeeds); `want` is in every rank's message.
void expectMismatch(const std::string& which, int world, const std::string& want) {
  JobSpec spec;
  spec.worker = TCCL_UNEVEN_WORKER_PATH;
  spec.world = world;
  spec.args = {"mismatch", which};
  spec.deadline = 60s;
  Job job = runJob(spec);
  expectAllOk(job);
  EXPECT_LT(job.seconds, 15.0) << "found only at the deadline (20 s)";
  ASSERT_EQ(job.records.size(), static_cast<size_t>(world)) << describe(job);
  for (const auto& [rank, rec] : job.records) {
    EXPECT_NE(rec.find(want), std::string::npos) << "rank " << rank << ": " << rec;
  }
}

TEST(Uneven, AllToAllVCountsThatDisagreeNameBothRanks) {
  expectMismatch("a2av", 4, "rank 2 sends 5 elements to rank 1, but rank 1 expects 4 from rank 2");
}

TEST(Uneven, GatherVCountsThatDisagreeNameBothRanks) {
  expectMismatch("gatherv", 3,
                 "rank 2 sends 4 elements to rank 0, but rank 0 expects 6 from rank 2");
}

TEST(Uneven, AllGatherVRecvCountsThatDisagreeNameTheOddRank) {
  // Rank 1's recvCounts differ from the others': its fingerprint is the odd one out.
  expectMismatch("agv", 4, "kind=Mismatch culprit=1");
}

}  // namespace
