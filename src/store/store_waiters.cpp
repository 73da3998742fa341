#include "store/store_waiters.hpp"

#include <algorithm>

#include "tccl/error.hpp"

namespace tccl::store {

uint64_t WaiterIndex::add(uint64_t conn, storeproto::Request request, Deadline deadline,
                          const std::vector<std::string>& absent) {
  const uint64_t id = next_++;
  Waiter w;
  w.conn = conn;
  w.request = std::move(request);
  w.deadline = deadline;
  for (const std::string& k : absent) {
    if (byKey_[k].insert(id).second) w.absent.push_back(k);
  }
  w.missing = w.absent.size();
  waiters_.emplace(id, std::move(w));
  return id;
}

const Waiter* WaiterIndex::find(uint64_t id) const {
  auto it = waiters_.find(id);
  return it == waiters_.end() ? nullptr : &it->second;
}

void WaiterIndex::unindex(uint64_t id, const Waiter& w) {
  for (const std::string& k : w.absent) {
    auto it = byKey_.find(k);
    if (it == byKey_.end()) continue;
    it->second.erase(id);
    if (it->second.empty()) byKey_.erase(it);
  }
}

Waiter WaiterIndex::take(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end())
    throwError(ErrorKind::Store, "store server: a parked request was answered twice");
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  unindex(id, w);
  return w;
}

void WaiterIndex::remove(uint64_t id) {
  if (waiters_.find(id) != waiters_.end()) take(id);
}

std::vector<uint64_t> WaiterIndex::keyCreated(const std::string& key) {
  auto it = byKey_.find(key);
  if (it == byKey_.end()) return {};
  std::unordered_set<uint64_t> ids = std::move(it->second);
  byKey_.erase(it);
  std::vector<uint64_t> ready;
  for (uint64_t id : ids) {
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    if (--w->second.missing == 0) ready.push_back(id);
  }
  std::sort(ready.begin(), ready.end());  // ids grow as requests park: first come, first served
  return ready;
}

}  // namespace tccl::store
