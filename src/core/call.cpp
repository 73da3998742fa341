#include "core/call.hpp"

#include <sstream>

namespace tccl {

const char* kindName(CallKind k) {
  switch (k) {
    case CallKind::AllReduce:
      return "allreduce";
    case CallKind::ReduceScatter:
      return "reduce_scatter";
    case CallKind::AllGather:
      return "allgather";
    case CallKind::Broadcast:
      return "broadcast";
    case CallKind::Reduce:
      return "reduce";
    case CallKind::Barrier:
      return "barrier";
    case CallKind::AllToAll:
      return "alltoall";
    case CallKind::Gather:
      return "gather";
    case CallKind::Scatter:
      return "scatter";
  }
  return "?";
}

std::string describe(int64_t seq, const Running& r) {
  std::ostringstream os;
  os << kindName(r.kind) << " #" << seq << " " << toString(r.dtype) << " x" << r.count;
  if (reduces(r.kind)) os << " " << toString(r.op);
  if (r.root >= 0) os << " root " << r.root;
  os << " " << toString(r.algorithm);
  return os.str();
}

}  // namespace tccl
