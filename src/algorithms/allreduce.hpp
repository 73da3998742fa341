// The all-reduce menu: one entry point that builds the schedule of any implemented
// all-reduce algorithm, so that the communicator does not change when one is added.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/schedule.hpp"
#include "tccl/types.hpp"

namespace tccl::algo {

struct HostLayout;

// The all-reduce algorithms this build implements (never Auto).
const std::vector<Algorithm>& allreduceAlgorithms();

// The schedule of `a` for this rank. Throws InvalidArgumentError for an algorithm
// that is not in allreduceAlgorithms(). `hosts` (which ranks share a host) matters to
// the hierarchical algorithm only; without it every rank counts as its own host (the
// hierarchical schedule is then the ring's). Throws InvalidArgumentError when hosts
// does not describe n ranks.
// elemSize: bytes per element (0: unknown), for the two-rank ring's order (ringAllreduce).
Schedule allreduceSchedule(Algorithm a, int rank, int n, size_t count, size_t segElems,
                           const HostLayout* hosts = nullptr, size_t elemSize = 0);

// True if the algorithm keeps reading its input after it has started writing its
// output (so an in-place call needs a copy of the input first).
bool allreduceReadsInputLate(Algorithm a);

}  // namespace tccl::algo
