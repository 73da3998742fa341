// PrefixStore: every key becomes "prefix/key" in the base store. Errors (timeouts
// included) name the full, prefixed keys, which is what an operator sees in the store.
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) throwError(ErrorKind::InvalidArgument, "PrefixStore '" + prefix_ + "' has no base");
  timeout_ = base_->timeout();
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(k(key), value); }

Bytes PrefixStore::get(const std::string& key) {
  // The base's get() waits for the base's timeout; honour this store's own when the
  // two differ (one extra round trip for a remote base, only then).
  if (timeout() != base_->timeout()) base_->wait({k(key)}, timeout());
  return base_->get(k(key));
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(k(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(k(key));
  return base_->check(full);
}

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(k(key));
  base_->wait(full, timeout);
}

bool PrefixStore::erase(const std::string& key) { return base_->erase(k(key)); }

std::vector<Bytes> PrefixStore::multiGet(const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(k(key));
  return base_->multiGet(full, timeout);
}

void PrefixStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(k(key));
  base_->multiSet(full, values);
}

Bytes PrefixStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return base_->compareSet(k(key), expected, desired);
}

}  // namespace tccl
