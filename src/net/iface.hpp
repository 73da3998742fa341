// Which address a rank listens on and publishes: TCCL_SOCKET_IFNAME and
// TCCL_SOCKET_FAMILY, the route to the store, and the loopback rule. docs/network.md
// is the user's account of the same rules.
//
// The decision is a pure function over a list of interface addresses, so that it is
// tested with synthetic interfaces (tests/unit/iface_test.cpp); listInterfaces() reads
// the real list from getifaddrs(3).
#pragma once

#include <net/if.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tccl::net {

// One address of one interface, as getifaddrs(3) reports it.
struct Interface {
  std::string name;     // "eth0"
  int family = 0;       // AF_INET or AF_INET6
  std::string address;  // numeric, without a scope: "10.0.0.5", "fd00::2"
  unsigned flags = 0;   // IFF_UP, IFF_LOOPBACK, ...
  bool up() const { return (flags & IFF_UP) != 0; }
  bool loopback() const { return (flags & IFF_LOOPBACK) != 0; }
};

// Every IPv4 and IPv6 address of every interface, in the kernel's order.
std::vector<Interface> listInterfaces();

// "lo 127.0.0.1 ::1; eth0 10.0.0.5 fd00::5 fe80::1 (link-local); docker0 (down) 172.17.0.1"
std::string describeInterfaces(const std::vector<Interface>& ifs);

// True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. False for what does not parse.
bool isLoopbackAddress(const std::string& ip);
// True when the listening (or connected) socket fd is bound to a loopback address; false for
// a wildcard (0.0.0.0, ::) or any other address: it can be reached from beyond this host.
bool boundToLoopback(int fd);
// True when the connected TCP socket fd has both ends on this host: its peer's address is
// a loopback address or the socket's own (Linux carries either over the loopback device).
// False for an unconnected socket or another family.
bool sameHost(int fd);
// True for fe80::/10: such an address needs a scope that other hosts cannot share.
bool isLinkLocalV6(const std::string& ip);
// AF_INET, AF_INET6, or AF_UNSPEC when ip is not a numeric address.
int addressFamily(const std::string& ip);

// A parsed TCCL_SOCKET_IFNAME: a comma-separated list whose entries are interface
// names (prefixes, or exact names after a leading '='), IPv4/IPv6 addresses, or CIDR
// blocks; a leading '^' turns the list into exclusions ("^docker,lo"; "^=eth0").
struct IfaceSpec {
  struct Entry {
    enum class Kind { Name, Address, Cidr } kind = Kind::Name;
    std::string text;
    int family = AF_UNSPEC;  // Address, Cidr
    uint8_t bytes[16] = {};  // Address, Cidr: network order, IPv4 in the first 4
    int prefixLen = 0;       // Cidr
  };
  std::string text;      // as given
  bool exclude = false;  // '^'
  bool exact = false;    // '=': names must match whole, not as a prefix
  std::vector<Entry> entries;

  bool matches(const Interface& itf) const;
};

// Throws InvalidArgumentError naming `variable` and the bad entry.
IfaceSpec parseIfaceSpec(const std::string& text, const char* variable = "TCCL_SOCKET_IFNAME");

// TCCL_SOCKET_FAMILY: AF_INET or AF_INET6 (also inet, inet6, ipv4, ipv6, 4, 6; any
// case). Throws InvalidArgumentError naming `variable` for anything else.
int parseFamily(const std::string& text, const char* variable = "TCCL_SOCKET_FAMILY");

// What the listen-address choice starts from.
struct ListenRequest {
  std::string ifname;        // TCCL_SOCKET_IFNAME; empty: unset
  int family = AF_UNSPEC;    // TCCL_SOCKET_FAMILY; AF_UNSPEC: unset
  std::string routeAddress;  // this host's address on its connection to the store; empty: none
};

struct ListenChoice {
  std::string address;    // numeric IP to listen on and publish
  std::string interface;  // its interface, when known
  std::string why;        // one sentence for the INFO log
};

// The pure choice (see docs/network.md, "How the address is chosen"):
//  - ifname set: the up, non-link-local addresses it matches (of `family` if set),
//    ranked: the route to the store first, then the preferred family (TCCL_SOCKET_FAMILY,
//    else the route's family, else IPv4), then non-loopback before loopback, then the
//    kernel's order. No match: InvalidArgumentError listing the interfaces.
//  - else a route to the store: that address; with a family that differs from the
//    route's, an address of that family on the same interface.
//  - else (a store with no network address: HashStore, FileStore): loopback of the
//    family (127.0.0.1, or ::1 for AF_INET6).
ListenChoice chooseListenAddress(const std::vector<Interface>& ifs, const ListenRequest& req);

// Who a process's loopback reaches: the kernel instance (boot id) and the network
// namespace. Two processes share a loopback iff both are equal; the hostname is for
// messages (and the comparison when /proc cannot tell).
struct HostIdentity {
  std::string hostname;
  std::string bootId;
  std::string netns;             // "net:[4026531840]"
  std::string toString() const;  // "host|boot|netns"
  static HostIdentity parse(const std::string& s);
  bool sameLoopback(const HostIdentity& other) const;
  std::string describe() const;  // "vm (boot 3eaf..., net:[4026531833])"
};
HostIdentity thisHost();

// The loopback rule. A rank may listen on a loopback address only if the job cannot
// span hosts, i.e. unless one of these holds (returned as the error message):
//  1. the world has more than one rank and the route to the store is not loopback
//     (the store is reachable from other hosts, so ranks there may join and would dial
//     this rank's loopback, i.e. their own);
//  2. the world has more than one rank and rank 0 does not share this rank's loopback
//     (other boot id or network namespace: ranks on different hosts).
// Returns nullopt when listening on `chosen` is fine.
std::optional<std::string> loopbackProblem(const std::string& chosen,
                                           const std::string& routeAddress, int worldSize,
                                           const HostIdentity& self,
                                           const std::optional<HostIdentity>& rank0);

}  // namespace tccl::net
