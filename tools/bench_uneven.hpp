// tccl bench for the uneven collectives (--op allgatherv, reduce_scatter_v, alltoallv,
// gatherv, scatterv): the counts of one rank for --skew K. Rank 0 is the heavy rank: its
// blocks are K units, every other rank's 1 unit (alltoallv: rank 0 sends K units to
// every rank, the others 1 unit; gatherv: rank 0 contributes K units). A unit is c
// elements; the row's size is the sum of the N blocks, (K + N - 1) x c elements.
#pragma once

#include <cstddef>
#include <functional>

#include "algorithms/collective_spec.hpp"
#include "tccl/communicator.hpp"

namespace tccl::cli {

struct UnevenPlan {
  algo::VCounts v;
  size_t count = 0;  // BuildArgs::count of this rank
  size_t inElems = 0, outElems = 0;
};

// The weight of rank p's blocks (K for rank 0, else 1).
inline size_t skewWeight(int p, int skew) { return p == 0 ? static_cast<size_t>(skew) : 1; }
UnevenPlan planUneven(algo::Collective coll, int n, int rank, int root, size_t unit, int skew);
void callUneven(Communicator& comm, algo::Collective coll, const UnevenPlan& plan, const void* in,
                void* out, DataType dtype, ReduceOp op, int root, const CollectiveOptions& o);
// Rank r's input: r+1 everywhere, but scatterv's root: block p is p+1.
void fillUneven(algo::Collective coll, const UnevenPlan& plan, int rank, int root, void* in,
                DataType dtype);
// Wrong elements of the output: block p holds p+1 (reduce_scatter_v: `reduced`,
// scatterv: rank+1); wrongIn(ptr, count, expected) counts them in one range.
double wrongUneven(algo::Collective coll, const UnevenPlan& plan, int n, int rank, int root,
                   const uint8_t* out, DataType dtype, double reduced,
                   const std::function<double(const uint8_t*, size_t, double)>& wrongIn);

}  // namespace tccl::cli
