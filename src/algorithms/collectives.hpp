// Schedules of the collectives other than all-reduce. Each function documents its
// buffers (with their origins in the logical vector), steps, and bytes per rank.
// N = world size, c = elements per block. The local parts of a result (the copies named
// below) are not in these schedules: the collective table's build() adds them as Copy
// ops (algorithms/collective_spec.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/schedule.hpp"

namespace tccl::algo {

// Ring reduce-scatter. Logical vector: N blocks of c (Input, origin 0). Output holds
// block r (origin r*c). Scratch: N*c (partial sums being forwarded).
// Step s = 0..N-2: send block (r-s-1) [from Input at s = 0, else Scratch] to r+1;
// receive block (r-s-2) from r-1 and reduce with Input into Scratch (the last step:
// into Output, where block r is complete; avg divides there).
// Bytes sent per rank: (N-1) * c. N == 1 is a local copy.
Schedule ringReduceScatter(int rank, int n, size_t c, size_t segElems);

// Ring all-gather. Logical vector: N blocks of c (Output, origin 0); Input is block r
// (origin r*c), copied into Output locally (a no-op in place).
// Step s = 0..N-2: send block (r-s) [from Input at s = 0, else Output] to r+1; receive
// block (r-s-1) from r-1 into Output. Bytes sent per rank: (N-1) * c.
Schedule ringAllGather(int rank, int n, size_t c, size_t segElems);

// Broadcast of c elements from root (Input at root, Output everywhere; the root's
// Input is copied into its Output locally, a no-op in place).
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
// is copied locally. Bytes sent per rank: (N-1) * c.
Schedule pairwiseAllToAll(int rank, int n, size_t c, size_t segElems);

// Gather to root: every rank sends its c elements (Input, origin 0) to the root, which
// receives block p into Output block p (origin 0; its own block copied locally).
Schedule flatGather(int rank, int n, int root, size_t c, size_t segElems);

// Scatter from root: the root sends Input block p (origin 0) to rank p; every rank
// receives its block into Output (origin r*c; the root's own block copied locally).
Schedule flatScatter(int rank, int n, int root, size_t c, size_t segElems);

// ---- uneven collectives (MPI's ...v calls; docs/algorithms.md, "Uneven collectives") ----
// Per-rank element counts and displacements, as MPI takes them; which vectors a
// collective reads is said at its builder (the others may be empty). Displacements are
// already resolved (the public calls fill packed ones when the caller gives none).
struct VCounts {
  std::vector<size_t> sendCounts, sendDispls;  // to / for rank p
  std::vector<size_t> recvCounts, recvDispls;  // from / of rank p
  bool operator==(const VCounts&) const = default;
};

// Uneven ring all-gather: block p (counts[p] elements) sits at displs[p] of Output
// (origin 0); Input is block r (origin displs[r]), copied locally. The steps of
// ringAllGather with block p's range in place of p*c: rank r sends every block but
// r+1 and receives every block but r. counts and displs are the same on every rank
// (the call's fingerprint carries the counts).
Schedule ringAllGatherV(int rank, int n, const std::vector<size_t>& counts,
                        const std::vector<size_t>& displs, size_t segElems);

// Uneven ring reduce-scatter (MPI_Reduce_scatter): Input holds the blocks packed, block p
// (counts[p] elements) at counts[0] + ... + counts[p-1]; Output is block r (origin
// there); Scratch: the sum of the counts. The steps of ringReduceScatter: rank r sends
// every block but r and receives every block but r-1.
Schedule ringReduceScatterV(int rank, int n, const std::vector<size_t>& counts, size_t segElems);

// Uneven all-to-all (MPI_Alltoallv), reads all four vectors: sendCounts[p] elements at
// Input + sendDispls[p] go to rank p, recvCounts[p] from rank p land at Output +
// recvDispls[p]. Logical offsets: Input element x is at x + recvDispls[r], Output
// element y at y + sendDispls[r] (inputOrigin, outputOrigin), so block r has one range
// in both and is copied locally. One step: first a count message to and from every
// other rank (Op::countMsg: a disagreement fails before any data lands), then every
// pair's data at once, segment by segment. Bytes sent: the sendCounts but r, plus
// 8 x (N-1) for the counts; received alike.
Schedule pairwiseAllToAllV(int rank, int n, const VCounts& v, size_t segElems);

// Uneven gather (MPI_Gatherv): every rank sends sendCount elements (Input, origin 0) to
// the root, preceded by a count message; the root (reads recvCounts, recvDispls)
// receives rank p's into Output at recvDispls[p] and checks each count first.
Schedule flatGatherV(int rank, int n, int root, size_t sendCount, const VCounts& v,
                     size_t segElems);
// Uneven scatter (MPI_Scatterv): the root (reads sendCounts, sendDispls) sends
// sendCounts[p] elements at Input + sendDispls[p] to rank p, preceded by a count
// message; rank p receives recvCount elements into Output (origin 0).
Schedule flatScatterV(int rank, int n, int root, size_t recvCount, const VCounts& v,
                      size_t segElems);

}  // namespace tccl::algo
