#include "algorithms/select.hpp"

#include <cstdio>
#include <cstdlib>

#include "core/config.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {

LinkModel LinkModel::fromEnv() {
  LinkModel m;
  auto readPositive = [](const char* name, double* out) {
    auto v = config::getEnv(name);
    if (!v) return;
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (*end != '\0' || !(x > 0)) {
      throwError(ErrorKind::InvalidArgument,
                 std::string(name) + "='" + *v + "' is not a positive number");
    }
    *out = x;
  };
  double alphaUs = m.alphaSec * 1e6;
  double gbps = 1.0 / m.betaSecPerByte / 1e9;
  readPositive("TCCL_ALPHA_US", &alphaUs);
  readPositive("TCCL_BETA_GBPS", &gbps);
  m.alphaSec = alphaUs * 1e-6;
  m.betaSecPerByte = 1.0 / (gbps * 1e9);
  return m;
}

double predictRingSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * m.alphaSec +
         2.0 * (n - 1) / n * static_cast<double>(bytes) * m.betaSecPerByte;
}

double predictNaiveSec(int n, size_t bytes, const LinkModel& m) {
  if (n <= 1) return 0;
  return (n - 1) * m.alphaSec + (n - 1) * static_cast<double>(bytes) * m.betaSecPerByte;
}

Algorithm chooseAllreduce(int n, size_t bytes, const LinkModel& m, std::string* why) {
  const double ring = predictRingSec(n, bytes, m);
  const double naive = predictNaiveSec(n, bytes, m);
  const Algorithm pick = naive < ring ? Algorithm::Naive : Algorithm::Ring;
  if (why != nullptr) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "cost model: ring %.1f us, naive %.1f us (alpha %.1f us, %.2f GB/s)", ring * 1e6,
                  naive * 1e6, m.alphaSec * 1e6, 1e-9 / m.betaSecPerByte);
    *why = buf;
  }
  return pick;
}

}  // namespace tccl::algo
