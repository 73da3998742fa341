#include "net/iface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

#include "base/config.hpp"
#include "base/log.hpp"
#include "net/socket.hpp"
#include "tccl/error.hpp"

namespace tccl::net {
namespace {

// Parses a numeric address (IPv6 may come in brackets) into 16 bytes; IPv4 fills the
// first 4. Returns the family, or AF_UNSPEC.
int parseAddress(const std::string& text, uint8_t out[16]) {
  std::string s = text;
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::memset(out, 0, 16);
  if (inet_pton(AF_INET, s.c_str(), out) == 1) return AF_INET;
  if (inet_pton(AF_INET6, s.c_str(), out) == 1) return AF_INET6;
  return AF_UNSPEC;
}

bool sameAddress(const std::string& a, const std::string& b) {
  uint8_t x[16], y[16];
  const int fa = parseAddress(a, x);
  return fa != AF_UNSPEC && fa == parseAddress(b, y) && std::memcmp(x, y, 16) == 0;
}

bool prefixEqual(const uint8_t* a, const uint8_t* b, int bits) {
  const int whole = bits / 8;
  if (std::memcmp(a, b, static_cast<size_t>(whole)) != 0) return false;
  const int rest = bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

const char* familyName(int family) {
  return family == AF_INET6 ? "IPv6" : family == AF_INET ? "IPv4" : "any family";
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return trim(line);
}

bool usable(const Interface& itf) {
  return itf.up() && (itf.family == AF_INET || itf.family == AF_INET6) &&
         !isLinkLocalV6(itf.address);
}

[[noreturn]] void invalid(const std::string& msg) { throwError(ErrorKind::InvalidArgument, msg); }

}  // namespace

std::vector<Interface> listInterfaces() {
  ifaddrs* head = nullptr;
  if (getifaddrs(&head) != 0) {
    throwError(ErrorKind::System, "getifaddrs: " + errnoString(errno));
  }
  std::vector<Interface> out;
  for (ifaddrs* ifa = head; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_name == nullptr) continue;
    const int family = ifa->ifa_addr->sa_family;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr, buf,
                sizeof buf);
    } else if (family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, buf,
                sizeof buf);
    } else {
      continue;
    }
    out.push_back({ifa->ifa_name, family, buf, ifa->ifa_flags});
  }
  freeifaddrs(head);
  return out;
}

std::string describeInterfaces(const std::vector<Interface>& ifs) {
  if (ifs.empty()) return "(none)";
  std::vector<std::string> order;
  for (const auto& itf : ifs) {
    if (std::find(order.begin(), order.end(), itf.name) == order.end()) order.push_back(itf.name);
  }
  std::ostringstream os;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i) os << "; ";
    os << order[i];
    bool first = true;
    for (const auto& itf : ifs) {
      if (itf.name != order[i]) continue;
      if (first && !itf.up()) os << " (down)";
      first = false;
      os << " " << itf.address;
      if (isLinkLocalV6(itf.address)) os << " (link-local)";
    }
  }
  return os.str();
}

bool isLoopbackAddress(const std::string& ip) {
  uint8_t b[16];
  const int family = parseAddress(ip, b);
  if (family == AF_INET) return b[0] == 127;
  if (family != AF_INET6) return false;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(b, kLoop6, 16) == 0) return true;
  return std::memcmp(b, kMapped, 12) == 0 && b[12] == 127;
}

bool boundToLoopback(int fd) { return isLoopbackAddress(localAddress(fd).ip()); }

bool sameHost(int fd) {
  const SockAddr peer = peerAddress(fd);
  if (peer.storage.ss_family != AF_INET && peer.storage.ss_family != AF_INET6) return false;
  const std::string ip = peer.ip();
  return isLoopbackAddress(ip) || ip == localAddress(fd).ip();
}

bool isLinkLocalV6(const std::string& ip) {
  uint8_t b[16];
  return parseAddress(ip, b) == AF_INET6 && b[0] == 0xFE && (b[1] & 0xC0) == 0x80;
}

int addressFamily(const std::string& ip) {
  uint8_t b[16];
  return parseAddress(ip, b);
}

bool IfaceSpec::matches(const Interface& itf) const {
  bool any = false;
  uint8_t addr[16];
  const int family = parseAddress(itf.address, addr);
  for (const Entry& e : entries) {
    switch (e.kind) {
      case Entry::Kind::Name:
        any = exact ? itf.name == e.text : itf.name.rfind(e.text, 0) == 0;
        break;
      case Entry::Kind::Address:
        any = family == e.family && std::memcmp(addr, e.bytes, 16) == 0;
        break;
      case Entry::Kind::Cidr:
        any = family == e.family && prefixEqual(addr, e.bytes, e.prefixLen);
        break;
    }
    if (any) break;
  }
  return exclude ? !any : any;
}

IfaceSpec parseIfaceSpec(const std::string& text, const char* variable) {
  IfaceSpec spec;
  spec.text = text;
  std::string s = trim(text);
  if (!s.empty() && s.front() == '^') {
    spec.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s.front() == '=') {
    spec.exact = true;
    s.erase(0, 1);
  }
  const std::string where = std::string(variable) + "='" + text + "'";
  std::istringstream is(s);
  std::string item;
  while (std::getline(is, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    IfaceSpec::Entry e;
    e.text = item;
    const auto slash = item.find('/');
    if (slash != std::string::npos) {
      e.kind = IfaceSpec::Entry::Kind::Cidr;
      e.family = parseAddress(item.substr(0, slash), e.bytes);
      const std::string len = item.substr(slash + 1);
      char* end = nullptr;
      errno = 0;
      const long bits = std::strtol(len.c_str(), &end, 10);
      const long maxBits = e.family == AF_INET6 ? 128 : 32;
      if (e.family == AF_UNSPEC || len.empty() || *end != '\0' || errno != 0 || bits < 0 ||
          bits > maxBits) {
        invalid(where + ": '" + item +
                "' is not a CIDR block (expected e.g. 10.0.0.0/8 or fd00::/8)");
      }
      e.prefixLen = static_cast<int>(bits);
    } else if ((e.family = parseAddress(item, e.bytes)) != AF_UNSPEC) {
      e.kind = IfaceSpec::Entry::Kind::Address;
    } else {
      e.kind = IfaceSpec::Entry::Kind::Name;
      if (item.find_first_of("^=[]% ") != std::string::npos) {
        invalid(where + ": '" + item + "' is neither an interface name, an address nor a CIDR");
      }
    }
    spec.entries.push_back(std::move(e));
  }
  if (spec.entries.empty()) {
    invalid(where +
            ": no interface, address or CIDR in it (e.g. eth0, =eth0, ^docker,lo, "
            "10.0.0.0/8)");
  }
  return spec;
}

int parseFamily(const std::string& text, const char* variable) {
  std::string s = trim(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "af_inet" || s == "inet" || s == "ipv4" || s == "4") return AF_INET;
  if (s == "af_inet6" || s == "inet6" || s == "ipv6" || s == "6") return AF_INET6;
  invalid(std::string(variable) + "='" + text + "': expected AF_INET or AF_INET6");
}

ListenChoice chooseListenAddress(const std::vector<Interface>& ifs, const ListenRequest& req) {
  const int routeFamily = addressFamily(req.routeAddress);
  const int preferred = req.family != AF_UNSPEC    ? req.family
                        : routeFamily != AF_UNSPEC ? routeFamily
                                                   : AF_INET;
  const char* preferredWhy = req.family != AF_UNSPEC    ? "TCCL_SOCKET_FAMILY"
                             : routeFamily != AF_UNSPEC ? "the family of the route to the store"
                                                        : "the default";
  auto interfaceOf = [&](const std::string& ip) -> std::string {
    for (const auto& itf : ifs) {
      if (sameAddress(itf.address, ip)) return itf.name;
    }
    return "";
  };
  const std::string familyClause = req.family != AF_UNSPEC
                                       ? std::string(" with TCCL_SOCKET_FAMILY=") +
                                             (req.family == AF_INET6 ? "AF_INET6" : "AF_INET")
                                       : "";

  if (!req.ifname.empty()) {
    const IfaceSpec spec = parseIfaceSpec(req.ifname);
    std::vector<const Interface*> cands;
    for (const auto& itf : ifs) {
      if (!usable(itf) || (req.family != AF_UNSPEC && itf.family != req.family)) continue;
      if (spec.matches(itf)) cands.push_back(&itf);
    }
    if (cands.empty()) {
      invalid("TCCL_SOCKET_IFNAME='" + req.ifname + "'" + familyClause +
              " matches no usable interface address (up, IPv4 or non-link-local IPv6). "
              "Interfaces on this host: " +
              describeInterfaces(ifs));
    }
    auto rank = [&](const Interface* i) {
      return std::make_tuple(
          !(routeFamily != AF_UNSPEC && sameAddress(i->address, req.routeAddress)),
          i->family != preferred, i->loopback());
    };
    std::stable_sort(cands.begin(), cands.end(),
                     [&](const Interface* a, const Interface* b) { return rank(a) < rank(b); });
    const Interface& best = *cands.front();
    std::ostringstream why;
    why << "TCCL_SOCKET_IFNAME=" << req.ifname << familyClause << " matches";
    for (size_t i = 0; i < cands.size(); ++i) {
      why << (i ? ", " : " ") << cands[i]->name << " " << cands[i]->address;
    }
    if (cands.size() == 1) {
      why << "; the only match";
    } else if (sameAddress(best.address, req.routeAddress)) {
      why << "; chose the one the route to the store leaves from";
    } else {
      why << "; chose the first " << familyName(preferred) << " match (" << preferredWhy << ")"
          << (best.loopback() ? "" : ", non-loopback first");
    }
    return {best.address, best.name, why.str()};
  }

  if (!req.routeAddress.empty()) {
    const std::string name = interfaceOf(req.routeAddress);
    if (req.family == AF_UNSPEC || req.family == routeFamily) {
      return {req.routeAddress, name,
              "this host's address on its connection to the store (the interface that routes "
              "to it" +
                  std::string(name.empty() ? "" : ", " + name) + ")"};
    }
    for (const auto& itf : ifs) {
      if (!name.empty() && itf.name == name && usable(itf) && itf.family == req.family) {
        return {itf.address, name,
                "the " + std::string(familyName(req.family)) + " address (TCCL_SOCKET_FAMILY) of " +
                    name + ", the interface that routes to the store (" + req.routeAddress + ")"};
      }
    }
    invalid("TCCL_SOCKET_FAMILY asks for " + std::string(familyName(req.family)) +
            " but the interface that routes to the store (" +
            (name.empty() ? std::string("unknown") : name) + ", " + req.routeAddress +
            ") has no usable " + familyName(req.family) +
            " address; name one with TCCL_SOCKET_IFNAME. Interfaces on this host: " +
            describeInterfaces(ifs));
  }

  const std::string loop = req.family == AF_INET6 ? "::1" : "127.0.0.1";
  return {loop, interfaceOf(loop),
          "the store has no network address (an in-process or file store), so loopback; set "
          "TCCL_SOCKET_IFNAME for ranks on several hosts"};
}

std::string HostIdentity::toString() const { return hostname + "|" + bootId + "|" + netns; }

HostIdentity HostIdentity::parse(const std::string& s) {
  HostIdentity h;
  std::istringstream is(s);
  std::getline(is, h.hostname, '|');
  std::getline(is, h.bootId, '|');
  std::getline(is, h.netns);
  return h;
}

bool HostIdentity::sameLoopback(const HostIdentity& o) const {
  if (!bootId.empty() && !netns.empty() && !o.bootId.empty() && !o.netns.empty()) {
    return bootId == o.bootId && netns == o.netns;
  }
  return hostname == o.hostname;
}

std::string HostIdentity::describe() const {
  std::string s = hostname.empty() ? std::string("?") : hostname;
  if (!bootId.empty() || !netns.empty()) {
    s += " (boot " + (bootId.empty() ? std::string("?") : bootId.substr(0, 8)) + ", " +
         (netns.empty() ? std::string("net ?") : netns) + ")";
  }
  return s;
}

HostIdentity thisHost() {
  HostIdentity h;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  h.bootId = readFirstLine("/proc/sys/kernel/random/boot_id");
  char link[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", link, sizeof link - 1);
  if (n > 0) h.netns.assign(link, static_cast<size_t>(n));
  // '|' separates the fields of toString(); no hostname or boot id contains it.
  for (std::string* f : {&h.hostname, &h.bootId, &h.netns}) {
    std::replace(f->begin(), f->end(), '|', '_');
  }
  return h;
}

std::optional<std::string> loopbackProblem(const std::string& chosen,
                                           const std::string& routeAddress, int worldSize,
                                           const HostIdentity& self,
                                           const std::optional<HostIdentity>& rank0) {
  if (worldSize <= 1 || !isLoopbackAddress(chosen)) return std::nullopt;
  if (!routeAddress.empty() && !isLoopbackAddress(routeAddress)) {
    return "refusing to listen on the loopback address " + chosen +
           ": the store is reached at a non-loopback address (this host's end: " + routeAddress +
           "), so ranks on other hosts may be in this job and could not reach this rank. For a "
           "job across hosts choose a routable interface (TCCL_SOCKET_IFNAME=eth0, a CIDR such "
           "as 10.0.0.0/8, or ^lo); for a job on one host put the store on a loopback address "
           "(TCCL_STORE=127.0.0.1:PORT or MASTER_ADDR=127.0.0.1)";
  }
  if (rank0 && !self.sameLoopback(*rank0)) {
    return "refusing to listen on the loopback address " + chosen +
           ": rank 0 runs on another host (" + rank0->describe() +
           "; this rank: " + self.describe() +
           "), which cannot reach this host's loopback. Set TCCL_SOCKET_IFNAME to an interface "
           "on the network the hosts share";
  }
  return std::nullopt;
}

}  // namespace tccl::net
