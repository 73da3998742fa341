// Environment parsing: every TCCL_* variable the core reads, its default, its range,
// and an error that names the variable when the value is bad.
#include "base/config.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "scoped_env.hpp"
#include "tccl/error.hpp"

namespace tccl::config {
namespace {

using tccl::testing::ScopedEnv;

// Runs f with `name` set to `value` and expects an InvalidArgumentError whose message
// names the variable and quotes the value.
template <typename F>
void expectRejected(const char* name, const char* value, F f) {
  ScopedEnv e(name, value);
  try {
    f();
    ADD_FAILURE() << name << "='" << value << "' was accepted";
  } catch (const InvalidArgumentError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find(name), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("'") + value + "'"), std::string::npos) << what;
    EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument);
  }
}

TEST(Config, GetEnvTreatsEmptyAsUnset) {
  {
    ScopedEnv e("TCCL_TEST_VAR", nullptr);
    EXPECT_EQ(getEnv("TCCL_TEST_VAR"), std::nullopt);
  }
  {
    ScopedEnv e("TCCL_TEST_VAR", "");
    EXPECT_EQ(getEnv("TCCL_TEST_VAR"), std::nullopt);
  }
  {
    ScopedEnv e("TCCL_TEST_VAR", " x ");
    EXPECT_EQ(getEnv("TCCL_TEST_VAR"), std::optional<std::string>(" x "));
  }
}

TEST(Config, GetEnvIntRange) {
  {
    ScopedEnv e("TCCL_TEST_INT", nullptr);
    EXPECT_EQ(getEnvInt("TCCL_TEST_INT", 0, 10), std::nullopt);
  }
  {
    ScopedEnv e("TCCL_TEST_INT", "10");
    EXPECT_EQ(getEnvInt("TCCL_TEST_INT", 0, 10), std::optional<int64_t>(10));
  }
  {
    ScopedEnv e("TCCL_TEST_INT", "-5");
    EXPECT_EQ(getEnvInt("TCCL_TEST_INT", -5, 10), std::optional<int64_t>(-5));
  }
  {
    ScopedEnv e("TCCL_TEST_INT", "9223372036854775807");
    EXPECT_EQ(getEnvInt("TCCL_TEST_INT", 0, INT64_MAX), std::optional<int64_t>(INT64_MAX));
  }
  auto get = [] { getEnvInt("TCCL_TEST_INT", 0, 10); };
  expectRejected("TCCL_TEST_INT", "11", get);
  expectRejected("TCCL_TEST_INT", "-1", get);
  expectRejected("TCCL_TEST_INT", "3.5", get);
  expectRejected("TCCL_TEST_INT", "7ms", get);
  expectRejected("TCCL_TEST_INT", "ten", get);
  expectRejected("TCCL_TEST_INT", "0x5", get);
  expectRejected("TCCL_TEST_INT", "-", get);
  // Out of range for int64 altogether (strtoll sets ERANGE).
  expectRejected("TCCL_TEST_INT", "99999999999999999999",
                 [] { getEnvInt("TCCL_TEST_INT", INT64_MIN, INT64_MAX); });
  // The message gives the allowed range.
  ScopedEnv e("TCCL_TEST_INT", "11");
  try {
    getEnvInt("TCCL_TEST_INT", 0, 10);
    ADD_FAILURE();
  } catch (const InvalidArgumentError& err) {
    EXPECT_NE(std::string(err.what()).find("[0, 10]"), std::string::npos) << err.what();
  }
}

TEST(Config, TimeoutMs) {
  {
    ScopedEnv e("TCCL_TIMEOUT_MS", nullptr);
    EXPECT_EQ(timeoutMs(), std::nullopt);
  }
  for (auto [text, value] : {std::pair<const char*, int64_t>{"1500", 1500},
                             {"1", 1},
                             {"1099511627776", int64_t{1} << 40}}) {
    ScopedEnv e("TCCL_TIMEOUT_MS", text);
    EXPECT_EQ(timeoutMs(), std::optional<int64_t>(value)) << text;
  }
  for (const char* bad : {"0", "-1", "-2", "1099511627777", "abc", "10s", "1e3", " "}) {
    expectRejected("TCCL_TIMEOUT_MS", bad, [] { timeoutMs(); });
  }
}

// 0 or less once meant "no timeout" (poll(-1)): now it says why it is refused.
TEST(Config, ZeroOrNegativeTimeoutSaysItWouldWaitForever) {
  for (const char* bad : {"0", "-1", "-300000"}) {
    ScopedEnv e("TCCL_TIMEOUT_MS", bad);
    try {
      timeoutMs();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgumentError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(std::string("TCCL_TIMEOUT_MS='") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("must be positive"), std::string::npos) << what;
      EXPECT_NE(what.find("wait forever"), std::string::npos) << what;
    }
  }
}

TEST(Config, CheckTimeoutBoundsEveryTimeout) {
  EXPECT_NO_THROW(checkTimeout("t", 1));
  EXPECT_NO_THROW(checkTimeout("t", kMaxTimeoutMs));
  for (int64_t bad : {int64_t{0}, int64_t{-1}, kMaxTimeoutMs + 1, INT64_MIN, INT64_MAX}) {
    try {
      checkTimeout("CommOptions::timeout of " + std::to_string(bad) + " ms", bad, 3);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgumentError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find("CommOptions::timeout of " + std::to_string(bad) + " ms"),
                std::string::npos)
          << what;
      EXPECT_EQ(err.info().rank, 3);
    }
  }
}

TEST(Config, SegmentBytes) {
  {
    ScopedEnv e("TCCL_SEGMENT_BYTES", nullptr);
    EXPECT_EQ(segmentBytes(), kDefaultSegmentBytes);
    EXPECT_EQ(kDefaultSegmentBytes, 1048576u);
  }
  for (auto [text, value] :
       {std::pair<const char*, size_t>{"4096", 4096}, {"1", 1}, {"4294967296", size_t{1} << 32}}) {
    ScopedEnv e("TCCL_SEGMENT_BYTES", text);
    EXPECT_EQ(segmentBytes(), value) << text;
  }
  for (const char* bad : {"0", "-4096", "4294967297", "64k", "big"}) {
    expectRejected("TCCL_SEGMENT_BYTES", bad, [] { segmentBytes(); });
  }
}

TEST(Config, AllreduceAlgorithm) {
  {
    ScopedEnv e("TCCL_ALGO", nullptr);
    EXPECT_EQ(allreduceAlgorithm(), std::nullopt);
  }
  struct Case {
    const char* text;
    std::optional<Algorithm> expected;
  };
  const Case cases[] = {
      {"ring", Algorithm::Ring},
      {"naive", Algorithm::Naive},
      {"auto", Algorithm::Auto},
      {"RING", Algorithm::Ring},
      {"allreduce:naive", Algorithm::Naive},
      {"allreduce:ring", Algorithm::Ring},
      {"broadcast:tree,allreduce:ring", Algorithm::Ring},
      {"allreduce:naive,broadcast:tree", Algorithm::Naive},
      {"broadcast:tree", std::nullopt},
      {"broadcast:tree,reduce:ring", std::nullopt},
      {"allreduce:ring,allreduce:naive", Algorithm::Ring},  // the first entry wins
  };
  for (const Case& c : cases) {
    ScopedEnv e("TCCL_ALGO", c.text);
    EXPECT_EQ(allreduceAlgorithm(), c.expected) << c.text;
  }
  for (const char* bad :
       {"trees", "allreduce:bush", "allreduce:", "broadcast:tree,allreduce:x", "ring2", "rin"}) {
    expectRejected("TCCL_ALGO", bad, [] { allreduceAlgorithm(); });
  }
  // The message names the offending entry and the accepted ones.
  ScopedEnv e("TCCL_ALGO", "broadcast:tree,allreduce:fast");
  try {
    allreduceAlgorithm();
    ADD_FAILURE();
  } catch (const InvalidArgumentError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("'fast'"), std::string::npos) << what;
    EXPECT_NE(what.find("ring"), std::string::npos) << what;
    EXPECT_NE(what.find("naive"), std::string::npos) << what;
  }
}

TEST(Config, SpinMicros) {
  {
    ScopedEnv e("TCCL_SPIN_US", nullptr);
    EXPECT_EQ(spinMicros(), std::nullopt);
  }
  for (auto [text, value] :
       {std::pair<const char*, int64_t>{"50", 50}, {"0", 0}, {"10000000", 10'000'000}}) {
    ScopedEnv e("TCCL_SPIN_US", text);
    EXPECT_EQ(spinMicros(), std::optional<int64_t>(value)) << text;
  }
  for (const char* bad : {"-1", "10000001", "fast"}) {
    expectRejected("TCCL_SPIN_US", bad, [] { spinMicros(); });
  }
}

TEST(Config, SocketBufferBytes) {
  {
    ScopedEnv e("TCCL_SOCKET_BUFFER", nullptr);  // unset: the communicator's rule
    EXPECT_EQ(socketBufferBytes(), std::nullopt);
  }
  {
    ScopedEnv e("TCCL_SOCKET_BUFFER", "0");  // autotuning everywhere
    EXPECT_EQ(socketBufferBytes(), std::optional<int>(0));
  }
  {
    ScopedEnv e("TCCL_SOCKET_BUFFER", "4194304");
    EXPECT_EQ(socketBufferBytes(), 4194304);
  }
  {
    ScopedEnv e("TCCL_SOCKET_BUFFER", "1073741824");
    EXPECT_EQ(socketBufferBytes(), 1 << 30);
  }
  for (const char* bad : {"-1", "1073741825", "4M"}) {
    expectRejected("TCCL_SOCKET_BUFFER", bad, [] { socketBufferBytes(); });
  }
}

TEST(Config, NsocksAndStripeBytes) {
  {
    ScopedEnv e("TCCL_NSOCKS", nullptr);
    EXPECT_EQ(nsocks(), 1);
  }
  for (int k : {1, 2, 4, 16}) {
    ScopedEnv e("TCCL_NSOCKS", std::to_string(k).c_str());
    EXPECT_EQ(nsocks(), k);
  }
  for (const char* bad : {"0", "-1", "17", "4x", "four"}) {
    expectRejected("TCCL_NSOCKS", bad, [] { nsocks(); });
  }
  {
    ScopedEnv e("TCCL_STRIPE_BYTES", nullptr);
    EXPECT_EQ(stripeBytes(), std::nullopt);
  }
  {
    ScopedEnv e("TCCL_STRIPE_BYTES", "65536");
    EXPECT_EQ(stripeBytes(), std::optional<uint64_t>(65536));
  }
  for (const char* bad : {"4095", "0", "1M"}) {
    expectRejected("TCCL_STRIPE_BYTES", bad, [] { stripeBytes(); });
  }
}

TEST(Config, ScopedEnvRestores) {
  ::setenv("TCCL_TEST_RESTORE", "before", 1);
  {
    ScopedEnv e("TCCL_TEST_RESTORE", "during");
    EXPECT_EQ(getEnv("TCCL_TEST_RESTORE"), std::optional<std::string>("during"));
  }
  EXPECT_EQ(getEnv("TCCL_TEST_RESTORE"), std::optional<std::string>("before"));
  ::unsetenv("TCCL_TEST_RESTORE");
}

}  // namespace
}  // namespace tccl::config
