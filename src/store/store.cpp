// The Store base class's defaults for the batched requests (include/tccl/store.hpp), and
// the multi-key rules every implementation shares.
#include "tccl/store.hpp"

#include "store/store_protocol.hpp"
#include "tccl/error.hpp"

namespace tccl {

std::vector<Bytes> Store::multiGet(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout) {
  storeproto::checkKeys(keys);
  if (keys.empty()) return {};
  wait(keys, timeout);
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(get(k));
  return out;
}

void Store::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  storeproto::checkPairs(keys, values);
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

Bytes Store::compareSet(const std::string& key, const Bytes&, const Bytes&) {
  throwError(ErrorKind::InvalidArgument,
             "compareSet(" + storeproto::describeKeys({key}) +
                 ") is not supported by this store (it cannot be made atomic from outside)");
}

}  // namespace tccl
