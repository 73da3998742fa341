// The TcpStoreServer's parked requests (GET, WAIT, MULTI_GET waiting for keys), indexed by
// the keys they miss: a write that creates a key touches only the requests waiting for
// that key, so N ranks waiting on N different keys cost O(1) per write, not O(N).
//
// Each waiter counts its distinct missing keys; keyCreated() decrements the count of
// every waiter of that key and returns those that reached zero. The index does not see
// erases: a waiter it returns may miss a key again, and the server re-checks before
// answering.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/store_protocol.hpp"

namespace tccl::store {

struct Waiter {
  uint64_t conn = 0;
  storeproto::Request request;
  Deadline deadline = Deadline::never();
  size_t missing = 0;               // distinct keys not yet created
  std::vector<std::string> absent;  // those keys, as parked (for removal)
};

class WaiterIndex {
 public:
  // Parks a request missing `absent` (duplicates allowed, at least one); returns its id.
  uint64_t add(uint64_t conn, storeproto::Request request, Deadline deadline,
               const std::vector<std::string>& absent);
  // nullptr once taken or removed.
  const Waiter* find(uint64_t id) const;
  // Removes a waiter and returns it (it must exist).
  Waiter take(uint64_t id);
  void remove(uint64_t id);
  // The waiters whose last missing key `key` was, in the order they parked.
  std::vector<uint64_t> keyCreated(const std::string& key);
  size_t size() const { return waiters_.size(); }
  // Keys with at least one waiter (for tests: the index must not keep stale entries).
  size_t indexedKeys() const { return byKey_.size(); }

 private:
  void unindex(uint64_t id, const Waiter& w);
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> byKey_;
};

}  // namespace tccl::store
