#include "core/call.hpp"

#include <sstream>

namespace tccl {

std::string describe(int64_t seq, const Running& r) {
  std::ostringstream os;
  const algo::CollectiveSpec& s = algo::spec(r.kind);
  os << s.name << " #" << seq << " " << toString(r.dtype) << " x" << r.count;
  if (s.takesOp) os << " " << toString(r.op);
  if (r.root >= 0) os << " root " << r.root;
  os << " " << toString(r.algorithm);
  if (r.v) {
    // The counts only this call's rank knows are the interesting ones: the send counts
    // where it has them, else the receive counts.
    const std::vector<size_t>& c = r.v->sendCounts.empty() ? r.v->recvCounts : r.v->sendCounts;
    if (!c.empty()) {
      os << " counts ";
      for (size_t i = 0; i < c.size() && i < 16; ++i) os << (i ? "," : "") << c[i];
      if (c.size() > 16) os << ",...";
    }
  }
  return os.str();
}

}  // namespace tccl
