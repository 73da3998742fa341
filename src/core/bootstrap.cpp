#include "core/bootstrap.hpp"

#include <algorithm>

#include "base/config.hpp"
#include "base/log.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl::bootstrap {

using namespace tccl::net;

std::string decideListenAddress(const std::string& explicitAddress, const std::string& routeAddress,
                                Store& store, int rank, int worldSize,
                                std::chrono::milliseconds timeout) {
  ListenRequest req;
  req.routeAddress = routeAddress;
  const auto ifname = config::getEnv("TCCL_SOCKET_IFNAME");
  if (ifname) req.ifname = *ifname;
  ListenChoice choice;
  try {
    if (auto fam = config::getEnv("TCCL_SOCKET_FAMILY")) req.family = parseFamily(*fam);
    if (!explicitAddress.empty()) {
      choice.address = explicitAddress;
      choice.why = "CommOptions::listenAddress";
      if (ifname || req.family != AF_UNSPEC) {
        choice.why += " (TCCL_SOCKET_IFNAME and TCCL_SOCKET_FAMILY do not apply)";
      }
    } else {
      choice = chooseListenAddress(listInterfaces(), req);
    }
  } catch (const Error& e) {
    throwError(e.info().kind, e.info().message, rank);
  }

  // The loopback rule looks at a numeric address; a name given in CommOptions counts as
  // loopback when every address it resolves to is.
  std::string numeric = choice.address;
  if (addressFamily(numeric) == AF_UNSPEC && !numeric.empty()) {
    try {
      auto addrs = resolve(numeric, 0);
      if (!addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [](const SockAddr& a) {
            return isLoopbackAddress(a.ip());
          })) {
        numeric = addrs.front().ip();
      }
    } catch (const Error&) {
      // listenOn reports an unresolvable name.
    }
  }
  const HostIdentity self = thisHost();
  std::optional<HostIdentity> rank0;
  if (worldSize > 1) {
    if (rank == 0) {
      store.setString("hostid/0", self.toString());
    } else if (isLoopbackAddress(numeric) &&
               (routeAddress.empty() || isLoopbackAddress(routeAddress))) {
      store.wait({"hostid/0"}, timeout);
      rank0 = HostIdentity::parse(store.getString("hostid/0"));
    }
  }
  if (auto problem = loopbackProblem(numeric, routeAddress, worldSize, self, rank0)) {
    throwError(ErrorKind::InvalidArgument, *problem, rank);
  }
  TCCL_INFO("listen address " << choice.address
                              << (choice.interface.empty() ? "" : " (" + choice.interface + ")")
                              << ": " << choice.why);
  return choice.address;
}

}  // namespace tccl::bootstrap
