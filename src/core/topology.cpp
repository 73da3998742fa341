#include "core/topology.hpp"

#include <vector>

#include "base/config.hpp"
#include "base/log.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl {

namespace {

std::string hostKeyName(int rank) { return "host/" + std::to_string(rank); }

std::chrono::milliseconds orDefault(std::chrono::milliseconds t) {
  return t.count() > 0 ? t : Store::kDefaultTimeout;
}

}  // namespace

std::string Topology::hostKey(const std::string& listenAddress) {
  if (auto id = config::getEnv("TCCL_HOST_ID")) return *id;
  try {
    return net::splitHostPort(listenAddress).first;
  } catch (const Error&) {
    return listenAddress;  // not host:port: the whole string names the host
  }
}

Topology::Topology(std::shared_ptr<Store> store, int rank, int size,
                   const std::string& listenAddress, std::chrono::milliseconds timeout)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      timeout_(orDefault(timeout)),
      key_(hostKey(listenAddress)) {
  store_->setString(hostKeyName(rank), key_);
}

algo::HostLayout Topology::readKeys(Store& store, int size, std::chrono::milliseconds timeout) {
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.push_back(hostKeyName(r));
  store.wait(names, orDefault(timeout));
  std::vector<std::string> keys;
  for (const std::string& n : names) keys.push_back(store.getString(n));
  return algo::HostLayout::fromKeys(keys);
}

algo::HostLayout Topology::read(const std::shared_ptr<Store>& userStore,
                                const std::string& commName, int size,
                                std::chrono::milliseconds timeout) {
  PrefixStore ns("tccl/" + commName, userStore);
  return readKeys(ns, size, timeout);
}

const algo::HostLayout& Topology::layout() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!layout_) {
    layout_ = readKeys(*store_, size_, timeout_);
    const int h = layout_->hostOf[static_cast<size_t>(rank_)];
    TCCL_INFO("hosts: " << layout_->describe() << "; this rank is local rank "
                        << layout_->localOf[static_cast<size_t>(rank_)] << " of host " << h << " ('"
                        << key_ << "')");
  }
  return *layout_;
}

const algo::HostCosts& Topology::costs() const {
  const algo::HostLayout& l = layout();
  std::lock_guard<std::mutex> lk(mu_);
  if (!costs_) costs_ = algo::HostCosts::of(l);
  return *costs_;
}

}  // namespace tccl
