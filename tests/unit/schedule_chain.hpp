// The longest chain of messages of a world's schedules (one per rank): a structural
// measure of a schedule, compared with each algorithm's closed-form step count by the
// schedule tests (allreduce_algos_test.cpp, hier_test.cpp). What schedules compute is
// checked by running them with the real executor (exec_harness.hpp).
#pragma once

#include <algorithm>
#include <vector>

#include "algorithms/schedule.hpp"

namespace tccl::algo::chain {

// With one segment per range, the longest chain of messages: a receive completes one
// hop after its matching send, an op starts after its dependency. Each op's time by
// fixpoint iteration (the schedules are acyclic).
inline int longestMessageChain(const std::vector<Schedule>& all) {
  const int n = static_cast<int>(all.size());
  std::vector<std::vector<int>> t(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    t[static_cast<size_t>(r)].assign(all[static_cast<size_t>(r)].ops.size(), 0);
  int longest = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      const Schedule& s = all[static_cast<size_t>(r)];
      std::vector<int> recvFrom(static_cast<size_t>(n), 0);
      for (size_t i = 0; i < s.ops.size(); ++i) {
        const Op& op = s.ops[i];
        int v =
            op.dependsOn >= 0 ? t[static_cast<size_t>(r)][static_cast<size_t>(op.dependsOn)] : 0;
        if (op.type == OpType::Recv) {
          // The m-th receive from p matches p's m-th send to this rank.
          const int m = recvFrom[static_cast<size_t>(op.peer)]++;
          const Schedule& ps = all[static_cast<size_t>(op.peer)];
          int seen = 0;
          for (size_t j = 0; j < ps.ops.size(); ++j) {
            if (ps.ops[j].type == OpType::Send && ps.ops[j].peer == r && seen++ == m) {
              v = std::max(v, t[static_cast<size_t>(op.peer)][j] + 1);
              break;
            }
          }
        }
        if (v != t[static_cast<size_t>(r)][i]) {
          t[static_cast<size_t>(r)][i] = v;
          changed = true;
        }
        longest = std::max(longest, v);
      }
    }
  }
  return longest;
}

}  // namespace tccl::algo::chain
