// The Gloo counterpart of `tccl bench` (all-reduce, float32 sum), for side-by-side
// runs: rank r of N, rendezvous through a Gloo FileStore in a directory shared by the
// ranks, Gloo's TCP transport on loopback. Per size: a correctness pass (rank r holds
// r+1), warm-up, barrier, timed iterations; time = the slowest rank's average per
// iteration (max over ranks, via a Gloo all-reduce). Prints CSV on rank 0:
//   impl,algo,world,size,time_us,algbw_gbps,busbw_gbps,wrong
// Usage: gloo_allreduce RANK WORLD STORE_DIR ITERS WARMUP ring|bcube SIZE...
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// Out of place, as tccl bench and the MPI program run: `in` is read, `out` written.
void allreduceSum(const std::shared_ptr<gloo::Context>& ctx, float* in, float* out, size_t n,
                  gloo::AllreduceOptions::Algorithm algo) {
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(algo);
  opts.setInput(in, n);
  opts.setOutput(out, n);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

double maxOverRanks(const std::shared_ptr<gloo::Context>& ctx, double v) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(&v, 1);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  gloo::allreduce(opts);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s RANK WORLD STORE_DIR ITERS WARMUP ring|bcube SIZE...\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::string storeDir = argv[3];
  const int iters = std::atoi(argv[4]), warmup = std::atoi(argv[5]);
  const std::string algoName = argv[6];
  const auto algo = algoName == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                        : gloo::AllreduceOptions::Algorithm::RING;
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(storeDir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->setTimeout(std::chrono::seconds(120));
  ctx->connectFullMesh(store, dev);
  if (rank == 0) std::printf("impl,algo,world,size,time_us,algbw_gbps,busbw_gbps,wrong\n");
  for (int i = 7; i < argc; ++i) {
    std::string s = argv[i];
    size_t mult = 1;
    if (!s.empty() && (s.back() == 'K' || s.back() == 'M' || s.back() == 'G')) {
      mult = s.back() == 'K' ? 1u << 10 : s.back() == 'M' ? 1u << 20 : 1u << 30;
      s.pop_back();
    }
    const size_t bytes = std::stoull(s) * mult;
    const size_t n = std::max<size_t>(1, bytes / sizeof(float));
    std::vector<float> in(n, static_cast<float>(rank + 1)), buf(n, -1.0f);
    allreduceSum(ctx, in.data(), buf.data(), n, algo);
    const float expect = static_cast<float>(world) * (world + 1) / 2;
    double wrong = 0;
    for (float x : buf) wrong += x != expect;
    for (int w = 0; w < warmup; ++w) allreduceSum(ctx, in.data(), buf.data(), n, algo);
    gloo::BarrierOptions bo(ctx);
    gloo::barrier(bo);
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < iters; ++it) allreduceSum(ctx, in.data(), buf.data(), n, algo);
    double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    sec = maxOverRanks(ctx, sec);
    wrong = maxOverRanks(ctx, wrong);
    const double algbw = static_cast<double>(n * sizeof(float)) / sec / 1e9;
    const double busbw = algbw * (world > 1 ? 2.0 * (world - 1) / world : 0);
    if (rank == 0) {
      std::printf("gloo,%s,%d,%zu,%.3f,%.6f,%.6f,%.0f\n", algoName.c_str(), world,
                  n * sizeof(float), sec * 1e6, algbw, busbw, wrong);
      std::fflush(stdout);
    }
  }
  return 0;
}
