// Uses only the installed public headers: two ranks as two threads of one process,
// each with its own Communicator over a shared in-process HashStore.
#include <cstdio>
#include <tccl/tccl.hpp>
#include <thread>
#include <vector>

int main() {
  auto store = std::make_shared<tccl::HashStore>();
  int failures = 0;
  auto rank = [&](int r) {
    tccl::Communicator comm(store, r, 2);
    std::vector<double> v(1000, r + 1.0);
    comm.allreduce(std::span<double>(v), tccl::ReduceOp::Sum);
    for (double x : v) failures += x != 3.0;
    const auto sent = comm.lastCall().traffic.total().payloadSent;
    if (sent != 1000 * sizeof(double)) ++failures;
    std::printf("rank %d: %s all-reduce, %llu payload bytes sent\n", r,
                comm.lastCall().algorithm.c_str(), static_cast<unsigned long long>(sent));
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  std::printf("%s\n", failures == 0 ? "consumer: PASS" : "consumer: FAIL");
  return failures == 0 ? 0 : 1;
}
