// Bootstrap's records (src/core/bootstrap.hpp): the job record rank 0 writes carries the
// job id and every field of its link model, so that every rank's Auto decides alike.
#include "core/bootstrap.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "scoped_env.hpp"
#include "tccl/store.hpp"

namespace tccl::bootstrap {
namespace {

using tccl::testing::ScopedEnv;

algo::LinkModel unusualModel() {
  algo::LinkModel m;
  m.alphaSec = 3e-6;
  m.betaSecPerByte = 1.0 / 7e9;
  m.hdBandwidthPenalty = 1.5;
  m.hdPenaltyFromBytes = 1234567;
  m.interAlphaSec = 9e-5;
  m.interBetaSecPerByte = 1.0 / 0.5e9;
  m.gammaSecPerByte = 1.0 / 40e9;
  m.cores = 5;
  return m;
}

TEST(JobRecord, RoundTripsTheIdAndTheWholeModel) {
  JobRecord r;
  r.jobId = 0xFEDCBA9876543210ull;
  r.model = unusualModel();
  auto back = decodeJobRecord(encodeJobRecord(r));
  ASSERT_TRUE(back) << encodeJobRecord(r);
  EXPECT_EQ(back->jobId, r.jobId);
  EXPECT_EQ(algo::encodeLinkModel(back->model), algo::encodeLinkModel(r.model));
  EXPECT_EQ(back->model.hdPenaltyFromBytes, 1234567);
  for (const char* bad : {"", "12", "x ", "-1 alpha_sec=1", "12 garbage"})
    EXPECT_FALSE(decodeJobRecord(bad)) << bad;
}

// Rank 1's own model (its tune file, say) gives way to rank 0's in every field.
TEST(JobRecord, EveryRankTakesRankZerosModel) {
  ScopedEnv cores("TCCL_CORES", "3");
  ScopedEnv id("TCCL_JOB_ID", "job-record-test");
  HashStore store;
  const algo::LinkModel zeros = unusualModel();
  algo::LinkModel ones;  // the defaults: every field differs from rank 0's
  JobRecord got1;
  std::thread r1([&] { got1 = joinJob(store, 1, ones, std::chrono::seconds(10)); });
  const JobRecord got0 = joinJob(store, 0, zeros, std::chrono::seconds(10));
  r1.join();
  EXPECT_EQ(got0.model.cores, 3);  // rank 0's cores, TCCL_CORES here
  EXPECT_EQ(got1.jobId, got0.jobId);
  EXPECT_EQ(algo::encodeLinkModel(got1.model), algo::encodeLinkModel(got0.model));
  EXPECT_EQ(got1.model.hdPenaltyFromBytes, zeros.hdPenaltyFromBytes);
}

}  // namespace
}  // namespace tccl::bootstrap
