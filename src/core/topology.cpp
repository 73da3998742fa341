#include "core/topology.hpp"

#include <algorithm>
#include <vector>

#include "base/config.hpp"
#include "base/log.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl {

namespace {

std::string hostKeyName(int rank) { return "host/" + std::to_string(rank); }

std::vector<std::string> asStrings(const std::vector<Bytes>& values) {
  std::vector<std::string> out;
  out.reserve(values.size());
  for (const Bytes& v : values) out.emplace_back(v.begin(), v.end());
  return out;
}

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
  return algo::HostLayout::fromKeys(asStrings(store.multiGet(names, orDefault(timeout))));
}

algo::HostLayout Topology::read(const std::shared_ptr<Store>& userStore,
                                const std::string& commName, int size,
                                std::chrono::milliseconds timeout) {
  PrefixStore ns("tccl/" + commName, userStore);
  return readKeys(ns, size, timeout);
}

algo::HostLayout Topology::readBefore(Deadline deadline) const {
  std::vector<std::string> names;
  for (int r = 0; r < size_; ++r) names.push_back(hostKeyName(r));
  const auto start = Deadline::Clock::now();
  // At least 1 ms: a store wait of 0 or less would not be bounded.
  const auto left = deadline.isNever()
                        ? timeout_
                        : std::max(std::chrono::milliseconds(1),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline.at() - Deadline::Clock::now()));
  // One request for every rank's host, however many ranks: the server answers it once the
  // last rank has published (N gets per rank made the first `auto` call O(N^2) requests).
  std::vector<Bytes> values;
  try {
    values = store_->multiGet(names, left);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Timeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_->check({names[static_cast<size_t>(r)]})) missing.push_back(r);
    }
    if (missing.empty()) throw;
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    ErrorInfo info;
    info.kind = ErrorKind::Timeout;
    info.rank = rank_;
    info.peer = missing.front();
    info.phase = "hosts";
    info.elapsedMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start)
            .count();
    info.timeoutMs = left.count();
    info.message = "rank " + std::to_string(missing.front()) + " has not published its host (" +
                   names[static_cast<size_t>(missing.front())] +
                   ") in the store: it has not created its communicator (missing: rank" +
                   (missing.size() > 1 ? "s " : " ") + list + ")";
    throwError(std::move(info));
  }
  return algo::HostLayout::fromKeys(asStrings(values));
}

const algo::HostLayout& Topology::layout() const { return layout(Deadline::after(timeout_)); }

const algo::HostLayout& Topology::layout(Deadline deadline) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!layout_) {
    layout_ = readBefore(deadline);
    const int h = layout_->hostOf[static_cast<size_t>(rank_)];
    TCCL_INFO("hosts: " << layout_->describe() << "; this rank is local rank "
                        << layout_->localOf[static_cast<size_t>(rank_)] << " of host " << h << " ('"
                        << key_ << "')");
  }
  return *layout_;
}

const algo::HostCosts& Topology::costs() const { return costs(Deadline::after(timeout_)); }

const algo::HostCosts& Topology::costs(Deadline deadline) const {
  const algo::HostLayout& l = layout(deadline);
  std::lock_guard<std::mutex> lk(mu_);
  if (!costs_) costs_ = algo::HostCosts::of(l);
  return *costs_;
}

}  // namespace tccl
