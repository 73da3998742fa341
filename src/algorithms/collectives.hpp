// Schedules of the collectives other than all-reduce. Each function documents its
// buffers (with their origins in the logical vector), steps, and bytes per rank.
// N = world size, c = elements per block.
#pragma once

#include <cstddef>

#include "algorithms/schedule.hpp"

namespace tccl::algo {

// Ring reduce-scatter. Logical vector: N blocks of c (Input, origin 0). Output holds
// block r (origin r*c). Scratch: N*c (partial sums being forwarded).
// Step s = 0..N-2: send block (r-s-1) [from Input at s = 0, else Scratch] to r+1;
// receive block (r-s-2) from r-1 and reduce with Input into Scratch (the last step:
// into Output, where block r is complete; avg divides there).
// Bytes sent per rank: (N-1) * c. N == 1 is a local copy (by the communicator).
Schedule ringReduceScatter(int rank, int n, size_t c, size_t segElems);

// Ring all-gather. Logical vector: N blocks of c (Output, origin 0); Input is block r
// (origin r*c), copied into Output by the communicator when not in place.
// Step s = 0..N-2: send block (r-s) [from Input at s = 0, else Output] to r+1; receive
// block (r-s-1) from r-1 into Output. Bytes sent per rank: (N-1) * c.
Schedule ringAllGather(int rank, int n, size_t c, size_t segElems);

// Broadcast of c elements from root (Input at root, Output elsewhere; the
// communicator passes the same buffer for both in place).
// Binomial tree: relative rank v = (r - root) mod N receives from v - 2^k (k the
// lowest set bit of v) and sends to v + 2^j for 2^j < 2^k, v + 2^j < N, largest j
// first; ceil(log2 N) rounds; every non-root receives c; the root sends
// ceil(log2 N) * c. Segments flow down the tree independently.
Schedule binomialBroadcast(int rank, int n, int root, size_t c, size_t segElems);
// Pipelined chain: ranks in ring order from the root; each forwards every segment to
// the next as soon as it has it. Every rank but the last sends c; time ~ (N-2+k)
// segment hops for k segments.
Schedule chainBroadcast(int rank, int n, int root, size_t c, size_t segElems);

// Reduce to root along a binomial tree (the mirror of binomialBroadcast): a rank
// folds its children's partial results into its own (Scratch, or Output at the
// root) in a fixed order, then sends the result to its parent. Every non-root sends
// c elements; the root's result is in Output (avg divides there).
Schedule binomialReduce(int rank, int n, int root, size_t c, size_t segElems);

// Dissemination barrier: rounds k = 0..ceil(log2 N)-1, send an empty message to
// r + 2^k and wait for one from r - 2^k; each round's send waits for the previous
// round's receive. No payload.
Schedule disseminationBarrier(int rank, int n);

// All-to-all: Input and Output are N blocks of c (origin 0); block p of Input goes
// to rank p and lands in its Output block r. All N-1 exchanges run at once. Block r
// is copied locally by the communicator. Bytes sent per rank: (N-1) * c.
Schedule pairwiseAllToAll(int rank, int n, size_t c, size_t segElems);

// Gather to root: every rank sends its c elements (Input, origin 0) to the root, which
// receives block p into Output block p (origin 0; its own block copied locally).
Schedule flatGather(int rank, int n, int root, size_t c, size_t segElems);

// Scatter from root: the root sends Input block p (origin 0) to rank p; every rank
// receives its block into Output (origin r*c; the root's own block copied locally).
Schedule flatScatter(int rank, int n, int root, size_t c, size_t segElems);

}  // namespace tccl::algo
