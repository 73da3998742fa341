#include "bench_uneven.hpp"

#include "cli.hpp"
#include "pattern.hpp"

namespace tccl::cli {

using algo::Collective;

namespace {

std::vector<size_t> packed(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) d[p] = d[p - 1] + counts[p - 1];
  return d;
}

}  // namespace

UnevenPlan planUneven(Collective coll, int n, int rank, int root, size_t unit, int skew) {
  UnevenPlan plan;
  std::vector<size_t> perRank(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) perRank[static_cast<size_t>(p)] = skewWeight(p, skew) * unit;
  const size_t mine = skewWeight(rank, skew) * unit;
  algo::VCounts& v = plan.v;
  plan.count = mine;
  switch (coll) {
    case Collective::AllGatherV:
    case Collective::ReduceScatterV:
      v.recvCounts = perRank;
      v.recvDispls = packed(perRank);
      break;
    case Collective::AllToAllV:
      v.sendCounts.assign(static_cast<size_t>(n), mine);
      v.sendDispls = packed(v.sendCounts);
      v.recvCounts = perRank;
      v.recvDispls = packed(perRank);
      plan.count = mine * static_cast<size_t>(n);
      break;
    case Collective::GatherV:
      if (rank == root) {
        v.recvCounts = perRank;
        v.recvDispls = packed(perRank);
      }
      break;
    case Collective::ScatterV:
      if (rank == root) {
        v.sendCounts = perRank;
        v.sendDispls = packed(perRank);
      }
      break;
    default:
      break;
  }
  algo::BuildArgs a;
  a.collective = coll;
  a.rank = rank;
  a.n = n;
  a.root = root;
  a.count = plan.count;
  a.v = &plan.v;
  plan.inElems = algo::inputElems(a);
  plan.outElems = algo::outputElems(a);
  return plan;
}

void callUneven(Communicator& comm, Collective coll, const UnevenPlan& plan, const void* in,
                void* out, DataType dtype, ReduceOp op, int root, const CollectiveOptions& o) {
  const algo::VCounts& v = plan.v;
  switch (coll) {
    case Collective::AllGatherV:
      comm.allGatherV(in, plan.count, out, v.recvCounts, v.recvDispls, dtype, o);
      break;
    case Collective::ReduceScatterV:
      comm.reduceScatterV(in, out, v.recvCounts, dtype, op, o);
      break;
    case Collective::AllToAllV:
      comm.allToAllV(in, v.sendCounts, v.sendDispls, out, v.recvCounts, v.recvDispls, dtype, o);
      break;
    case Collective::GatherV:
      comm.gatherV(in, plan.count, out, v.recvCounts, v.recvDispls, dtype, root, o);
      break;
    case Collective::ScatterV:
      comm.scatterV(in, v.sendCounts, v.sendDispls, out, plan.count, dtype, root, o);
      break;
    default:
      break;
  }
}

void fillUneven(Collective coll, const UnevenPlan& plan, int n, int rank, int root, void* in,
                DataType dtype, ReduceOp op) {
  auto* bytes = static_cast<uint8_t*>(in);
  const size_t elem = dataTypeSize(dtype);
  switch (coll) {
    case Collective::ReduceScatterV:  // the packed blocks: global index = place in the input
      pattern::fillReduce(in, plan.inElems, dtype, op, rank, n, 0);
      return;
    case Collective::AllToAllV:
      for (size_t p = 0; p < plan.v.sendCounts.size(); ++p) {
        pattern::fillMoved(bytes + plan.v.sendDispls[p] * elem, plan.v.sendCounts[p], dtype, rank,
                           static_cast<int>(p), 0);
      }
      return;
    case Collective::ScatterV:
      if (rank != root) return;
      for (size_t p = 0; p < plan.v.sendCounts.size(); ++p) {
        pattern::fillMoved(bytes + plan.v.sendDispls[p] * elem, plan.v.sendCounts[p], dtype, root,
                           static_cast<int>(p), 0);
      }
      return;
    default:  // allgatherv, gatherv: rank r's own data
      pattern::fillMoved(in, plan.inElems, dtype, rank, 0, 0);
      return;
  }
}

double wrongUneven(Collective coll, const UnevenPlan& plan, int n, int rank, int root,
                   const uint8_t* out, DataType dtype, ReduceOp op) {
  const size_t elem = dataTypeSize(dtype);
  auto blocks = [&](bool toMe) {
    size_t w = 0;
    for (int p = 0; p < n; ++p) {
      const size_t i = static_cast<size_t>(p);
      w += pattern::checkMoved(out + plan.v.recvDispls[i] * elem, plan.v.recvCounts[i], dtype, p,
                               toMe ? rank : 0, 0)
               .count;
    }
    return static_cast<double>(w);
  };
  switch (coll) {
    case Collective::AllGatherV:
      return blocks(false);
    case Collective::AllToAllV:
      return blocks(true);
    case Collective::GatherV:
      return rank == root ? blocks(false) : 0;
    case Collective::ReduceScatterV: {
      size_t first = 0;  // this rank's block starts after the blocks of the ranks before it
      for (int p = 0; p < rank; ++p) first += plan.v.recvCounts[static_cast<size_t>(p)];
      return static_cast<double>(pattern::checkReduce(out, plan.count, dtype, op, n, first).count);
    }
    case Collective::ScatterV:
      return static_cast<double>(pattern::checkMoved(out, plan.count, dtype, root, rank, 0).count);
    default:
      return 0;
  }
}

}  // namespace tccl::cli
