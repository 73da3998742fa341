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
  return os.str();
}

}  // namespace tccl
