// HashStore: a map under one mutex; waiters sleep on one condition variable that every
// write notifies (writes are rare and waiters few: rendezvous, not a database).
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "store/store_protocol.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {

struct HashStore::Impl {
  std::mutex mu;
  std::condition_variable changed;
  std::unordered_map<std::string, Bytes> data;

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (data.find(k) == data.end()) out.push_back(k);
    }
    return out;
  }

  // Waits (lock held) until every key exists; throws the store timeout otherwise.
  void waitLocked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                  std::chrono::milliseconds timeout, std::string_view op) {
    const auto start = Deadline::Clock::now();
    const Deadline deadline = storeproto::deadlineAfter(timeout);
    auto ready = [&] { return missing(keys).empty(); };
    if (deadline.isNever()) {
      changed.wait(lock, ready);
      return;
    }
    if (changed.wait_until(lock, deadline.at(), ready)) return;
    storeproto::throwStoreTimeout(
        op, missing(keys), timeout,
        std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start));
  }
};

HashStore::HashStore() : impl_(std::make_unique<Impl>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  storeproto::checkKey(key);
  storeproto::checkValue(value);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->data[key] = value;
  }
  impl_->changed.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  storeproto::checkKey(key);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->waitLocked(lock, {key}, timeout(), "get");
  return impl_->data.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  storeproto::checkKey(key);
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->data.find(key);
    std::string error;
    std::optional<int64_t> r =
        storeproto::applyAdd(key, it == impl_->data.end() ? nullptr : &it->second, delta, &error);
    if (!r) throwError(ErrorKind::InvalidArgument, error);
    result = *r;
    impl_->data[key] = storeproto::formatDecimal(result);
  }
  impl_->changed.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  storeproto::checkKeys(keys);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->missing(keys).empty();
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  storeproto::checkKeys(keys);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->waitLocked(lock, keys, timeout, "wait");
}

bool HashStore::erase(const std::string& key) {
  storeproto::checkKey(key);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->data.erase(key) > 0;
}

}  // namespace tccl

namespace tccl {

std::vector<Bytes> HashStore::multiGet(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  storeproto::checkKeys(keys);
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->waitLocked(lock, keys, timeout, "multiGet");
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(impl_->data.at(k));
  return out;
}

void HashStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  storeproto::checkPairs(keys, values);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (size_t i = 0; i < keys.size(); ++i) impl_->data[keys[i]] = values[i];
  }
  impl_->changed.notify_all();
}

Bytes HashStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  storeproto::checkKey(key);
  storeproto::checkValue(expected);
  storeproto::checkValue(desired);
  Bytes now;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->data.find(key);
    if (!storeproto::compareSetMatches(it == impl_->data.end() ? nullptr : &it->second, expected)) {
      return it == impl_->data.end() ? Bytes() : it->second;
    }
    impl_->data[key] = desired;
    now = desired;
  }
  impl_->changed.notify_all();
  return now;
}

}  // namespace tccl
