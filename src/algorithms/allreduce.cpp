#include "algorithms/allreduce.hpp"

#include <set>
#include <string>

#include "algorithms/allreduce_algos.hpp"
#include "tccl/error.hpp"

namespace tccl::algo {

const std::vector<Algorithm>& allreduceAlgorithms() {
  static const std::vector<Algorithm> kAlgorithms = {Algorithm::Ring,
                                                     Algorithm::Naive,
                                                     Algorithm::Tree,
                                                     Algorithm::HalvingDoubling,
                                                     Algorithm::RecursiveDoubling,
                                                     Algorithm::Hierarchical};
  return kAlgorithms;
}

Schedule allreduceSchedule(Algorithm a, int rank, int n, size_t count, size_t segElems,
                           const HostLayout* hosts, size_t elemSize) {
  switch (a) {
    case Algorithm::Ring:
      return ringAllreduce(rank, n, count, segElems, elemSize);
    case Algorithm::Naive:
      return naiveAllreduce(rank, n, count, segElems);
    case Algorithm::Tree:
      return treeAllreduce(rank, n, count, segElems);
    case Algorithm::HalvingDoubling:
      return halvingDoublingAllreduce(rank, n, count, segElems);
    case Algorithm::RecursiveDoubling:
      return recursiveDoublingAllreduce(rank, n, count, segElems);
    case Algorithm::Hierarchical:
      if (hosts == nullptr)
        return hierarchicalAllreduce(rank, HostLayout::separate(n), count, segElems);
      if (hosts->worldSize() != n) {
        throwError(ErrorKind::InvalidArgument, "hierarchical all-reduce: the host layout has " +
                                                   std::to_string(hosts->worldSize()) +
                                                   " ranks, the world " + std::to_string(n));
      }
      return hierarchicalAllreduce(rank, *hosts, count, segElems);
    default:
      break;
  }
  throwError(ErrorKind::InvalidArgument,
             "all-reduce algorithm '" + std::string(toString(a)) + "' is not implemented");
}

// Only naive reads its input after writing its output. Tree, halving-doubling,
// recursive doubling and hierarchical read Input only before (or in the same
// element-wise reduction as) the first write of each range, so in place they need no
// copy.
bool allreduceReadsInputLate(Algorithm a) { return a == Algorithm::Naive; }

}  // namespace tccl::algo
