// tccl bench for the uneven collectives (--op allgatherv, reduce_scatter_v, alltoallv,
// gatherv, scatterv): the counts of one rank for --skew K. Rank 0 is the heavy rank: its
// blocks are K units, every other rank's 1 unit (alltoallv: rank 0 sends K units to
// every rank, the others 1 unit; gatherv: rank 0 contributes K units). A unit is c
// elements; the row's size is the sum of the N blocks, (K + N - 1) x c elements.
#pragma once

#include <cstddef>

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
// Rank r's input, from tools/pattern.hpp: data that is only moved is tagged with its
// source and destination (allgatherv, gatherv: destination 0, as all-gather), and
// reduce_scatter_v's packed input holds the reduction pattern at its place in the input.
void fillUneven(algo::Collective coll, const UnevenPlan& plan, int n, int rank, int root, void* in,
                DataType dtype, ReduceOp op);
// Wrong elements of the output, each compared with its closed form (pattern.hpp).
double wrongUneven(algo::Collective coll, const UnevenPlan& plan, int n, int rank, int root,
                   const uint8_t* out, DataType dtype, ReduceOp op);

}  // namespace tccl::cli
