// The hierarchical all-reduce over real processes and sockets, with hosts faked per
// rank through TCCL_HOST_ID (tests/proc/worker.cpp, scenario "hier"): exact results for
// every dtype, op and placement, and the payload bytes each rank sends to ranks on its
// own host and on other hosts equal to the closed forms (hierBytesSent), for a uniform
// layout (the shard variant), an interleaved one and an uneven one (the leader
// variant). The inter-host link is declared slow (TCCL_INTER_BETA_GBPS), so Auto must
// pick hier for a large call.
#include <gtest/gtest.h>

#include "harness.hpp"

using namespace tccl;
using namespace tccl::testing;
using namespace std::chrono_literals;

namespace {

struct HierCase {
  const char* name;
  const char* hosts;  // each rank's host
  const char* counts;
  // What Auto may pick with a slow inter-host link. Round robin (rank r on host r % 4):
  // hd's first exchange (distance 4) stays within a host, so it sends exactly hier's
  // 1.5 V per host across hosts in as many inter-host steps; below hd's penalty
  // threshold (8 MiB) the model rates them within a few intra-host alphas.
  const char* autoPicks = "hier";
};

// CTest's name for a case ends with gtest's print of its parameter: without this, the bytes of
// the pointers, which change with every build.
void PrintTo(const HierCase& c, std::ostream* os) { *os << c.name; }

class HierProc : public ::testing::TestWithParam<HierCase> {};

TEST_P(HierProc, ExactResultsAndBytesWithinAndAcrossHosts) {
  const HierCase& c = GetParam();
  JobSpec spec;
  spec.world = 8;
  spec.args = {"hier", c.hosts, c.counts, "100003"};
  spec.extraEnv = {{"TCCL_INTER_BETA_GBPS", "0.01"}};
  spec.deadline = 240s;
  Job job = runJob(spec);
  expectAllOk(job);
  uint64_t inter = 0;
  for (int r = 0; r < 8; ++r) {
    const std::string& rec = job.records[r];
    ASSERT_EQ(rec.rfind("ok", 0), 0u) << describe(job);
    const size_t at = rec.find("auto=");
    ASSERT_NE(at, std::string::npos) << rec;
    const std::string picked = rec.substr(at + 5, rec.find_first_of(" \n", at) - at - 5);
    const std::string allowed = std::string(",") + c.autoPicks + ",";
    EXPECT_NE(allowed.find("," + picked + ","), std::string::npos)
        << "rank " << r << ": " << rec << " (expected one of " << c.autoPicks << ")";
    inter += std::stoull(rec.substr(rec.find("inter=") + 6));
  }
  EXPECT_GT(inter, 0u) << "nothing crossed hosts";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HierProc,
    ::testing::Values(HierCase{"four_hosts_of_two", "0,0,1,1,2,2,3,3", "0,1,N-1,N+1,100003"},
                      HierCase{"interleaved", "0,1,2,3,0,1,2,3", "1,N+1,1001", "hier,hd"},
                      HierCase{"uneven_3_1_2_2", "0,0,0,1,2,2,3,3", "0,1,N+1,10007"}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
