// Which ranks share a host, as the hierarchical all-reduce and the cost model need it.
//
// Every rank publishes a host key in the communicator's store at construction
// ("host/<rank>"): TCCL_HOST_ID if set, else the IP address of its listen address
// (ranks on one machine listen on the same address; TCCL_HOST_ID lets tests fake
// hosts on one machine, and names hosts whose ranks listen on different addresses).
// The layout (ranks with equal keys share a host; hosts numbered by their lowest rank,
// ranks listed ascending) is read on first use, the first hierarchical or Auto
// all-reduce: every rank reaches that only after every rank has been constructed, so
// construction itself never waits for the other ranks.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "algorithms/allreduce_algos.hpp"
#include "algorithms/select.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"

namespace tccl {

class Topology {
 public:
  // Publishes this rank's key in `store` (the communicator's namespaced store).
  // timeout bounds the wait for the other ranks' keys on first use (<= 0: the store's
  // default).
  Topology(std::shared_ptr<Store> store, int rank, int size, const std::string& listenAddress,
           std::chrono::milliseconds timeout);

  const std::string& key() const { return key_; }
  // Every rank's key, grouped; read once (thread-safe), waiting for the others' keys
  // until `deadline` (a call's), or for the timeout given at construction. A rank whose
  // key is still missing then is a TimeoutError naming it as the peer (phase "hosts"):
  // it has not created its communicator.
  const algo::HostLayout& layout(Deadline deadline) const;
  const algo::HostLayout& layout() const;
  // The cost model's view of the layout, computed once.
  const algo::HostCosts& costs(Deadline deadline) const;
  const algo::HostCosts& costs() const;

  // TCCL_HOST_ID if set, else the host part of "ip:port" / "[v6]:port".
  static std::string hostKey(const std::string& listenAddress);
  // The layout a communicator named `commName` of `size` ranks published in `userStore`
  // (the store given to the Communicator), for tests and tools.
  static algo::HostLayout read(const std::shared_ptr<Store>& userStore, const std::string& commName,
                               int size, std::chrono::milliseconds timeout);

 private:
  static algo::HostLayout readKeys(Store& store, int size, std::chrono::milliseconds timeout);
  algo::HostLayout readBefore(Deadline deadline) const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string key_;
  mutable std::mutex mu_;
  mutable std::optional<algo::HostLayout> layout_;
  mutable std::optional<algo::HostCosts> costs_;
};

}  // namespace tccl
