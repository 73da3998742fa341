// Ranks as threads in one process: each thread builds its own Communicator over one store.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tccl/tccl.hpp"

namespace tccl::testing {

// Runs fn(comm) on n threads, each with its own Communicator over `store`; every rank's
// exception is a test failure naming the rank.
inline void runRanks(int n, const std::shared_ptr<Store>& store,
                     const std::function<void(Communicator&)>& fn, CommOptions opts = {}) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(store, r, n, opts);
        fn(comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace tccl::testing
