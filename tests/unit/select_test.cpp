// The cost model behind Algorithm::Auto: the formulas in select.hpp, the choices they
// imply, and the TCCL_ALPHA_US / TCCL_BETA_GBPS overrides.
#include "algorithms/select.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "scoped_env.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {
namespace {

using tccl::testing::ScopedEnv;

TEST(CostModel, DefaultsAreLoopbackClass) {
  const LinkModel m;
  EXPECT_DOUBLE_EQ(m.alphaSec, 20e-6);
  EXPECT_DOUBLE_EQ(m.betaSecPerByte, 0.5e-9);
}

TEST(CostModel, PredictionsFollowTheFormulas) {
  LinkModel m;
  m.alphaSec = 1e-5;
  m.betaSecPerByte = 1e-9;
  for (int n : {2, 3, 4, 7, 16}) {
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20, size_t{3} << 30}) {
      const double v = static_cast<double>(bytes);
      // ring : 2(n-1) alpha + 2(n-1)/n V beta; naive: (n-1) alpha + (n-1) V beta.
      EXPECT_DOUBLE_EQ(predictRingSec(n, bytes, m),
                       2.0 * (n - 1) * 1e-5 + 2.0 * (n - 1) / n * v * 1e-9)
          << "n=" << n << " bytes=" << bytes;
      EXPECT_DOUBLE_EQ(predictNaiveSec(n, bytes, m), (n - 1) * 1e-5 + (n - 1) * v * 1e-9)
          << "n=" << n << " bytes=" << bytes;
    }
  }
  // Hand-computed: n = 4, 1 MB, alpha 10 us, 1 GB/s.
  EXPECT_NEAR(predictRingSec(4, 1000000, m), 60e-6 + 1.5e-3, 1e-12);
  EXPECT_NEAR(predictNaiveSec(4, 1000000, m), 30e-6 + 3e-3, 1e-12);
  // One rank moves nothing.
  EXPECT_EQ(predictRingSec(1, 1 << 20, m), 0.0);
  EXPECT_EQ(predictNaiveSec(1, 1 << 20, m), 0.0);
}

TEST(CostModel, TwoRanksAlwaysNaive) {
  // n = 2: naive sends the same bytes in half the messages.
  const LinkModel m;
  for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20, size_t{1} << 34}) {
    EXPECT_EQ(chooseAllreduce(2, bytes, m, nullptr), Algorithm::Naive) << bytes;
  }
}

TEST(CostModel, RingForLargeNaiveForSmall) {
  const LinkModel m;
  for (int n = 3; n <= 64; ++n) {
    EXPECT_EQ(chooseAllreduce(n, 8, m, nullptr), Algorithm::Naive) << "n=" << n;
    EXPECT_EQ(chooseAllreduce(n, size_t{64} << 20, m, nullptr), Algorithm::Ring) << "n=" << n;
  }
}

TEST(CostModel, CrossoverWhereTheFormulasMeet) {
  // n = 3: naive wins while 2 alpha + 2 V beta < 4 alpha + 4/3 V beta, i.e. V < 3 alpha / beta
  // = 3 * 20e-6 * 2e9 = 120000 bytes with the default model.
  const LinkModel m;
  EXPECT_EQ(chooseAllreduce(3, 110000, m, nullptr), Algorithm::Naive);
  EXPECT_EQ(chooseAllreduce(3, 130000, m, nullptr), Algorithm::Ring);
  // n = 4: 3 alpha + 3 V beta < 6 alpha + 1.5 V beta, i.e. V < 2 alpha / beta = 80000.
  EXPECT_EQ(chooseAllreduce(4, 75000, m, nullptr), Algorithm::Naive);
  EXPECT_EQ(chooseAllreduce(4, 85000, m, nullptr), Algorithm::Ring);
}

TEST(CostModel, TiesGoToTheRing) {
  // One rank: both predictions are 0.
  EXPECT_EQ(chooseAllreduce(1, 1 << 20, LinkModel{}, nullptr), Algorithm::Ring);
  // n = 3, alpha 1 s, beta 1 s/B, V = 3: ring 4 + 4/3*3, naive 2 + 2*3, both 8 (exact in
  // binary only if the division rounds kindly, so check the predictions agree first).
  LinkModel m;
  m.alphaSec = 1.0;
  m.betaSecPerByte = 1.0;
  if (predictRingSec(3, 3, m) == predictNaiveSec(3, 3, m)) {
    EXPECT_EQ(chooseAllreduce(3, 3, m, nullptr), Algorithm::Ring);
  }
}

TEST(CostModel, WhyReportsBothPredictions) {
  LinkModel m;
  m.alphaSec = 10e-6;
  m.betaSecPerByte = 1e-9;  // 1 GB/s
  std::string why;
  chooseAllreduce(4, 1000000, m, &why);
  // ring 1560.0 us, naive 3030.0 us.
  EXPECT_NE(why.find("ring 1560.0 us"), std::string::npos) << why;
  EXPECT_NE(why.find("naive 3030.0 us"), std::string::npos) << why;
  EXPECT_NE(why.find("alpha 10.0 us"), std::string::npos) << why;
  EXPECT_NE(why.find("1.00 GB/s"), std::string::npos) << why;
}

TEST(CostModel, FromEnvDefaultsWhenUnset) {
  ScopedEnv a("TCCL_ALPHA_US", nullptr);
  ScopedEnv b("TCCL_BETA_GBPS", nullptr);
  const LinkModel m = LinkModel::fromEnv();
  EXPECT_DOUBLE_EQ(m.alphaSec, 20e-6);
  EXPECT_DOUBLE_EQ(m.betaSecPerByte, 0.5e-9);
  // Empty means unset.
  ScopedEnv c("TCCL_ALPHA_US", "");
  EXPECT_DOUBLE_EQ(LinkModel::fromEnv().alphaSec, 20e-6);
}

TEST(CostModel, FromEnvReadsBoth) {
  ScopedEnv a("TCCL_ALPHA_US", "5");
  ScopedEnv b("TCCL_BETA_GBPS", "10");
  const LinkModel m = LinkModel::fromEnv();
  EXPECT_DOUBLE_EQ(m.alphaSec, 5e-6);
  EXPECT_DOUBLE_EQ(m.betaSecPerByte, 1e-10);
  ScopedEnv c("TCCL_ALPHA_US", "0.5");
  ScopedEnv d("TCCL_BETA_GBPS", "1.25e1");
  const LinkModel m2 = LinkModel::fromEnv();
  EXPECT_DOUBLE_EQ(m2.alphaSec, 0.5e-6);
  EXPECT_DOUBLE_EQ(m2.betaSecPerByte, 1.0 / 12.5e9);
}

TEST(CostModel, FromEnvChangesTheChoice) {
  // A very slow link per message makes naive (fewer messages) win at 1 MB on 8 ranks.
  ScopedEnv a("TCCL_ALPHA_US", "100000");
  ScopedEnv b("TCCL_BETA_GBPS", nullptr);
  EXPECT_EQ(chooseAllreduce(8, 1 << 20, LinkModel::fromEnv(), nullptr), Algorithm::Naive);
  EXPECT_EQ(chooseAllreduce(8, 1 << 20, LinkModel{}, nullptr), Algorithm::Ring);
}

TEST(CostModel, FromEnvRejectsBadValues) {
  for (const char* name : {"TCCL_ALPHA_US", "TCCL_BETA_GBPS"}) {
    for (const char* bad : {"abc", "0", "-3", "5x", "nan", "-inf", "1,5"}) {
      ScopedEnv e(name, bad);
      try {
        LinkModel::fromEnv();
        ADD_FAILURE() << name << "='" << bad << "' was accepted";
      } catch (const InvalidArgumentError& err) {
        const std::string what = err.what();
        EXPECT_NE(what.find(name), std::string::npos) << what;
        EXPECT_NE(what.find(bad), std::string::npos) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tccl::algo
