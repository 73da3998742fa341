// Interface and address choice (src/net/iface.hpp) over synthetic interface
// lists, the loopback rule, IPv6 address handling in socket.hpp, and the same things
// end to end in one process: TcpStore over ::1, a Communicator refusing loopback when
// its store is reachable from other hosts, a clear error when TCCL_SOCKET_IFNAME
// matches nothing.
#include "net/iface.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <thread>

#include "net/socket.hpp"
#include "scoped_env.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;
using namespace tccl::net;
using tccl::testing::ScopedEnv;
using namespace std::chrono_literals;

namespace {

constexpr unsigned kUp = IFF_UP;
constexpr unsigned kLo = IFF_UP | IFF_LOOPBACK;

// A host with loopback, two Ethernet ports (eth0 dual-stack with a link-local
// address), a bridge that is down and an InfiniBand port.
std::vector<Interface> sampleHost() {
  return {
      {"lo", AF_INET, "127.0.0.1", kLo},    {"eth0", AF_INET, "10.0.0.5", kUp},
      {"eth1", AF_INET, "10.1.0.5", kUp},   {"docker0", AF_INET, "172.17.0.1", 0},
      {"ib0", AF_INET, "192.168.7.5", kUp}, {"lo", AF_INET6, "::1", kLo},
      {"eth0", AF_INET6, "fd00::5", kUp},   {"eth0", AF_INET6, "fe80::1", kUp},
      {"docker0", AF_INET6, "fd17::1", 0},
  };
}

ListenChoice choose(const std::string& ifname, int family = AF_UNSPEC,
                    const std::string& route = "") {
  return chooseListenAddress(sampleHost(), {ifname, family, route});
}

std::string chooseError(const std::string& ifname, int family = AF_UNSPEC,
                        const std::string& route = "") {
  try {
    choose(ifname, family, route);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "(no error)";
}

CommOptions named(const std::string& name) {
  CommOptions o;
  o.name = name;
  return o;
}

bool ipv6LoopbackWorks() {
  try {
    Fd fd = listenOn("::1", 0);
    return fd.valid();
  } catch (const Error&) {
    return false;
  }
}

// A non-loopback address of this machine that accepts connections, if any.
std::string someNonLoopbackAddress() {
  for (const Interface& itf : listInterfaces()) {
    if (itf.family != AF_INET || !itf.up() || itf.loopback()) continue;
    try {
      Fd fd = listenOn(itf.address, 0);
      if (fd.valid()) return itf.address;
    } catch (const Error&) {
    }
  }
  return "";
}

TEST(IfaceSpec, ParsesNamesPrefixesExclusionsAddressesAndCidrs) {
  IfaceSpec s = parseIfaceSpec("eth");
  EXPECT_FALSE(s.exclude);
  EXPECT_FALSE(s.exact);
  ASSERT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.entries[0].kind, IfaceSpec::Entry::Kind::Name);

  s = parseIfaceSpec("^=docker0, lo");
  EXPECT_TRUE(s.exclude);
  EXPECT_TRUE(s.exact);
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[1].text, "lo");

  s = parseIfaceSpec("10.0.0.5,fd00::/8,[::1],192.168.0.0/16");
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries[0].kind, IfaceSpec::Entry::Kind::Address);
  EXPECT_EQ(s.entries[0].family, AF_INET);
  EXPECT_EQ(s.entries[1].kind, IfaceSpec::Entry::Kind::Cidr);
  EXPECT_EQ(s.entries[1].family, AF_INET6);
  EXPECT_EQ(s.entries[1].prefixLen, 8);
  EXPECT_EQ(s.entries[2].kind, IfaceSpec::Entry::Kind::Address);
  EXPECT_EQ(s.entries[2].family, AF_INET6);
  EXPECT_EQ(s.entries[3].prefixLen, 16);
}

TEST(IfaceSpec, RejectsMalformedSpecsNamingTheVariable) {
  for (const char* bad : {"", "^", "=", " , ", "10.0.0.0/33", "fd00::/129", "/8", "10.0.0.0/",
                          "10.0.0.0/x", "eth0%1", "a b"}) {
    try {
      parseIfaceSpec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("TCCL_SOCKET_IFNAME"), std::string::npos) << e.what();
    }
  }
}

TEST(IfaceSpec, MatchesByPrefixExactNameExclusionAddressAndCidr) {
  const Interface eth0{"eth0", AF_INET, "10.0.0.5", kUp};
  const Interface eth10{"eth10", AF_INET, "10.2.0.5", kUp};
  const Interface lo{"lo", AF_INET, "127.0.0.1", kLo};
  const Interface lo6{"lo", AF_INET6, "::1", kLo};
  const Interface v6{"eth0", AF_INET6, "fd00::5", kUp};

  EXPECT_TRUE(parseIfaceSpec("eth").matches(eth0));
  EXPECT_TRUE(parseIfaceSpec("eth1").matches(eth10));  // a prefix, as NCCL
  EXPECT_FALSE(parseIfaceSpec("=eth1").matches(eth10));
  EXPECT_FALSE(parseIfaceSpec("eth0").matches(eth10));
  EXPECT_TRUE(parseIfaceSpec("=eth0").matches(eth0));
  EXPECT_FALSE(parseIfaceSpec("=eth").matches(eth0));
  EXPECT_FALSE(parseIfaceSpec("^docker,lo").matches(lo));
  EXPECT_TRUE(parseIfaceSpec("^docker,lo").matches(eth0));
  EXPECT_TRUE(parseIfaceSpec("^=eth0").matches(eth10));
  EXPECT_FALSE(parseIfaceSpec("^=eth0").matches(eth0));
  EXPECT_TRUE(parseIfaceSpec("ib,eth1,eth0").matches(eth0));
  EXPECT_TRUE(parseIfaceSpec("10.0.0.5").matches(eth0));
  EXPECT_FALSE(parseIfaceSpec("10.0.0.6").matches(eth0));
  EXPECT_TRUE(parseIfaceSpec("10.0.0.0/8").matches(eth10));
  EXPECT_FALSE(parseIfaceSpec("10.0.0.0/16").matches(eth10));
  EXPECT_FALSE(parseIfaceSpec("0.0.0.0/0").matches(v6));  // families never cross
  EXPECT_TRUE(parseIfaceSpec("0.0.0.0/0").matches(lo));
  EXPECT_FALSE(parseIfaceSpec("0.0.0.0/0").matches(lo6));
  EXPECT_TRUE(parseIfaceSpec("::1").matches(lo6));
  EXPECT_TRUE(parseIfaceSpec("0:0::1").matches(lo6));  // compared as bytes, not text
  EXPECT_TRUE(parseIfaceSpec("fd00::/8").matches(v6));
  EXPECT_FALSE(parseIfaceSpec("fd00::/8").matches(lo6));
  EXPECT_TRUE(parseIfaceSpec("fd00:0:0:0:0:0:0:4/127").matches(v6));  // ::4 and ::5
  EXPECT_FALSE(parseIfaceSpec("fd00:0:0:0:0:0:0:4/128").matches(v6));
  EXPECT_FALSE(parseIfaceSpec("fd00:0:0:0:0:0:0:6/127").matches(v6));
  EXPECT_TRUE(parseIfaceSpec("127.0.0.0/8,fd00::/8").matches(lo));
}

TEST(ChooseListenAddress, WithIfnameRanksRouteThenFamilyThenNonLoopbackThenKernelOrder) {
  // A prefix: eth0 and eth1 match; IPv4 (the default family) in the kernel's order.
  ListenChoice c = choose("eth");
  EXPECT_EQ(c.address, "10.0.0.5");
  EXPECT_EQ(c.interface, "eth0");
  EXPECT_NE(c.why.find("TCCL_SOCKET_IFNAME=eth matches"), std::string::npos) << c.why;
  // The address the route to the store leaves from wins among the matches.
  c = choose("eth", AF_UNSPEC, "10.1.0.5");
  EXPECT_EQ(c.address, "10.1.0.5");
  EXPECT_NE(c.why.find("route to the store"), std::string::npos) << c.why;
  // The route's family is preferred when the route itself does not match.
  EXPECT_EQ(choose("eth0", AF_UNSPEC, "fd99::1").address, "fd00::5");
  // An exclusion includes loopback, but non-loopback comes first.
  EXPECT_EQ(choose("^docker").address, "10.0.0.5");
  EXPECT_EQ(choose("^docker,lo,eth").address, "192.168.7.5");
  EXPECT_EQ(choose("ib").interface, "ib0");
  // Addresses and CIDR blocks.
  EXPECT_EQ(choose("10.1.0.0/16").address, "10.1.0.5");
  EXPECT_EQ(choose("10.1.0.5").interface, "eth1");
  EXPECT_EQ(choose("fd00::/8").address, "fd00::5");
  c = choose("::1");
  EXPECT_EQ(c.address, "::1");
  EXPECT_EQ(c.interface, "lo");
  EXPECT_NE(c.why.find("the only match"), std::string::npos) << c.why;
  // A family: filter, not preference.
  EXPECT_EQ(choose("=lo").address, "127.0.0.1");
  EXPECT_EQ(choose("=lo", AF_INET6).address, "::1");
  EXPECT_EQ(choose("=lo", AF_UNSPEC, "::1").address, "::1");
  EXPECT_EQ(choose("eth0", AF_INET6).address, "fd00::5");
  EXPECT_EQ(choose("0.0.0.0/0,::/0", AF_INET6).address, "fd00::5");
}

TEST(ChooseListenAddress, NoMatchIsAnErrorListingTheInterfaces) {
  std::string e = chooseError("nosuch0");
  EXPECT_NE(e.find("TCCL_SOCKET_IFNAME='nosuch0' matches no usable interface"), std::string::npos)
      << e;
  EXPECT_NE(e.find("lo 127.0.0.1 ::1; eth0 10.0.0.5 fd00::5 fe80::1 (link-local); eth1 10.1.0.5; "
                   "docker0 (down) 172.17.0.1 fd17::1; ib0 192.168.7.5"),
            std::string::npos)
      << e;
  // An interface that is down, an IPv6 link-local address, a family the match lacks.
  EXPECT_NE(chooseError("docker").find("matches no usable"), std::string::npos);
  EXPECT_NE(chooseError("fe80::/10").find("matches no usable"), std::string::npos);
  e = chooseError("eth1", AF_INET6);
  EXPECT_NE(e.find("with TCCL_SOCKET_FAMILY=AF_INET6"), std::string::npos) << e;
  EXPECT_NE(chooseError("=eth").find("matches no usable"), std::string::npos);
  EXPECT_NE(chooseError("10.0.0.0/33").find("not a CIDR"), std::string::npos);
}

TEST(ChooseListenAddress, WithoutIfnameTheRouteToTheStoreElseLoopback) {
  ListenChoice c = choose("", AF_UNSPEC, "10.1.0.5");
  EXPECT_EQ(c.address, "10.1.0.5");
  EXPECT_EQ(c.interface, "eth1");
  EXPECT_NE(c.why.find("routes to it"), std::string::npos) << c.why;
  // A family other than the route's: that family's address on the route's interface.
  c = choose("", AF_INET6, "10.0.0.5");
  EXPECT_EQ(c.address, "fd00::5");
  EXPECT_EQ(c.interface, "eth0");
  EXPECT_EQ(choose("", AF_INET6, "127.0.0.1").address, "::1");
  EXPECT_EQ(choose("", AF_INET, "::1").address, "127.0.0.1");
  EXPECT_NE(chooseError("", AF_INET6, "10.1.0.5").find("eth1, 10.1.0.5) has no usable IPv6"),
            std::string::npos);
  // No route (an in-process or file store): loopback of the family.
  EXPECT_EQ(choose("").address, "127.0.0.1");
  EXPECT_EQ(choose("", AF_INET6).address, "::1");
}

TEST(Family, ParsesTheNamesAndRejectsTheRest) {
  EXPECT_EQ(parseFamily("AF_INET"), AF_INET);
  EXPECT_EQ(parseFamily("af_inet6"), AF_INET6);
  EXPECT_EQ(parseFamily("ipv6"), AF_INET6);
  EXPECT_EQ(parseFamily("4"), AF_INET);
  EXPECT_THROW(parseFamily("AF_UNIX"), InvalidArgumentError);
  EXPECT_EQ(addressFamily("::ffff:1.2.3.4"), AF_INET6);
  EXPECT_EQ(addressFamily("[::1]"), AF_INET6);
  EXPECT_EQ(addressFamily("localhost"), AF_UNSPEC);
}

TEST(Loopback, AddressClassification) {
  for (const char* a : {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "[::1]"}) {
    EXPECT_TRUE(isLoopbackAddress(a)) << a;
  }
  for (const char* a : {"10.0.0.1", "128.0.0.1", "::2", "fd00::1", "::ffff:10.0.0.1", "localhost",
                        "", "0.0.0.0", "::"}) {
    EXPECT_FALSE(isLoopbackAddress(a)) << a;
  }
  EXPECT_TRUE(isLinkLocalV6("fe80::1"));
  EXPECT_TRUE(isLinkLocalV6("febf::1"));
  EXPECT_FALSE(isLinkLocalV6("fec0::1"));
  EXPECT_FALSE(isLinkLocalV6("169.254.0.1"));
}

TEST(Loopback, RuleRefusesLoopbackOnlyWhenTheJobMaySpanHosts) {
  const HostIdentity a{"alpha", "boot-a", "net:[1]"};
  const HostIdentity aOtherNs{"alpha", "boot-a", "net:[2]"};
  const HostIdentity b{"beta", "boot-b", "net:[1]"};
  // Not loopback, or a world of one: always fine.
  EXPECT_FALSE(loopbackProblem("10.0.0.5", "10.0.0.5", 8, a, b));
  EXPECT_FALSE(loopbackProblem("127.0.0.1", "10.0.0.5", 1, a, b));
  // Rule 1: the store is reached at a non-loopback address.
  auto p = loopbackProblem("127.0.0.1", "10.0.0.5", 2, a, std::nullopt);
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("refusing to listen on the loopback address 127.0.0.1"), std::string::npos);
  EXPECT_NE(p->find("10.0.0.5"), std::string::npos) << *p;
  EXPECT_NE(p->find("TCCL_SOCKET_IFNAME"), std::string::npos) << *p;
  EXPECT_TRUE(loopbackProblem("::1", "fd00::5", 2, a, a));
  // A loopback store: one host, unless rank 0 says otherwise (rule 2).
  EXPECT_FALSE(loopbackProblem("::1", "127.0.0.1", 2, a, a));
  EXPECT_FALSE(loopbackProblem("127.0.0.1", "", 2, a, std::nullopt));
  p = loopbackProblem("127.0.0.1", "", 2, a, b);
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("rank 0 runs on another host (beta"), std::string::npos) << *p;
  // Another network namespace on the same kernel is another loopback.
  EXPECT_TRUE(loopbackProblem("127.0.0.1", "127.0.0.1", 4, a, aOtherNs));
  // Without /proc facts the hostname decides.
  EXPECT_FALSE(
      loopbackProblem("127.0.0.1", "", 2, {"alpha", "", ""}, HostIdentity{"alpha", "", ""}));
  EXPECT_TRUE(loopbackProblem("127.0.0.1", "", 2, {"alpha", "", ""}, HostIdentity{"beta", "", ""}));
}

TEST(Loopback, HostIdentityRoundTripsAndMatchesItself) {
  const HostIdentity me = thisHost();
  EXPECT_FALSE(me.hostname.empty());
  const HostIdentity back = HostIdentity::parse(me.toString());
  EXPECT_EQ(back.hostname, me.hostname);
  EXPECT_EQ(back.bootId, me.bootId);
  EXPECT_EQ(back.netns, me.netns);
  EXPECT_TRUE(me.sameLoopback(back));
}

TEST(Interfaces, TheRealListHasLoopback) {
  const auto ifs = listInterfaces();
  bool lo4 = false;
  for (const auto& itf : ifs) lo4 |= itf.loopback() && itf.up() && itf.address == "127.0.0.1";
  EXPECT_TRUE(lo4) << describeInterfaces(ifs);
  EXPECT_EQ(chooseListenAddress(ifs, {"127.0.0.0/8", AF_UNSPEC, ""}).address, "127.0.0.1");
}

TEST(SocketAddresses, HostPortSplittingAndJoiningHandleIpv6) {
  EXPECT_EQ(splitHostPort("[::1]:29500"), std::make_pair(std::string("::1"), uint16_t{29500}));
  EXPECT_EQ(splitHostPort("[fd00::5]:0"), std::make_pair(std::string("fd00::5"), uint16_t{0}));
  EXPECT_EQ(splitHostPort("10.0.0.5:80"), std::make_pair(std::string("10.0.0.5"), uint16_t{80}));
  EXPECT_EQ(splitHostPort("node-1:80").first, "node-1");
  for (const char* bad : {"::1:80", "fd00::5", "[::1]", "[::1]80", "[]:80", "host", "h:70000"}) {
    EXPECT_THROW(splitHostPort(bad), InvalidArgumentError) << bad;
  }
  try {
    splitHostPort("::1:80");
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("[v6]:port"), std::string::npos) << e.what();
  }
  EXPECT_EQ(joinHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(joinHostPort("[::1]", 5), "[::1]:5");
  EXPECT_EQ(joinHostPort("10.0.0.5", 5), "10.0.0.5:5");
  EXPECT_EQ(joinHostPort("node-1", 5), "node-1:5");
}

TEST(SocketAddresses, FormatsMappedAndScopedIpv6) {
  SockAddr a;
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(7);
  ASSERT_EQ(inet_pton(AF_INET6, "::ffff:10.0.0.5", &in6->sin6_addr), 1);
  a.len = sizeof *in6;
  EXPECT_EQ(a.toString(), "10.0.0.5:7");
  ASSERT_EQ(inet_pton(AF_INET6, "fd00::5", &in6->sin6_addr), 1);
  EXPECT_EQ(a.toString(), "[fd00::5]:7");
  ASSERT_EQ(inet_pton(AF_INET6, "fe80::1", &in6->sin6_addr), 1);
  in6->sin6_scope_id = if_nametoindex("lo");
  ASSERT_NE(in6->sin6_scope_id, 0u);
  EXPECT_EQ(a.ip(), "fe80::1%lo");
  auto r = resolve("[::1]", 9);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().toString(), "[::1]:9");
}

TEST(SocketIpv6, ListenConnectAndDualStackWildcard) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  Fd l = listenOn("::1", 0);
  const SockAddr la = localAddress(l.get());
  EXPECT_EQ(la.ip(), "::1");
  Fd c = connectWithRetry("::1", la.port(), Deadline::after(5s));
  EXPECT_EQ(localAddress(c.get()).ip(), "::1");
  EXPECT_EQ(peerAddress(c.get()).toString(), "[::1]:" + std::to_string(la.port()));
  // "::" takes both families.
  Fd any = listenOn("::", 0);
  const uint16_t port = localAddress(any.get()).port();
  Fd c4 = connectWithRetry("127.0.0.1", port, Deadline::after(5s));
  Fd c6 = connectWithRetry("::1", port, Deadline::after(5s));
  EXPECT_TRUE(c4.valid());
  EXPECT_TRUE(c6.valid());
  SockAddr from;
  Fd got;
  for (int i = 0; i < 500 && !got.valid(); ++i) {
    got = acceptNonBlocking(any.get(), &from);
    if (!got.valid()) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(got.valid());
  // The IPv4 client shows as IPv4, not ::ffff:127.0.0.1 (accept order is the kernel's).
  EXPECT_TRUE(from.ip() == "127.0.0.1" || from.ip() == "::1") << from.ip();
}

TEST(TcpStoreIpv6, ServerOnLoopbackV6AndClientsOfBothFamilies) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  TcpStoreServer server("::1", 0);
  TcpStore client("::1", server.port(), 5s);
  client.setString("k", "v6");
  EXPECT_EQ(client.getString("k"), "v6");
  EXPECT_EQ(client.add("n", 3), 3);
  EXPECT_EQ(client.localAddress(), "::1");
  TcpStore bracketed("[::1]", server.port(), 5s);
  EXPECT_EQ(bracketed.getString("k"), "v6");

  // The wildcard is beyond the loopback: it needs a key, or the opt-out (docs/security.md).
  ScopedEnv optOut("TCCL_AUTH", "off");
  TcpStoreServer dual("::", 0);
  TcpStore v4("127.0.0.1", dual.port(), 5s);
  TcpStore v6("::1", dual.port(), 5s);
  v4.setString("from", "v4");
  EXPECT_EQ(v6.getString("from"), "v4");
  EXPECT_EQ(v4.localAddress(), "127.0.0.1");
  EXPECT_EQ(v6.localAddress(), "::1");
}

TEST(CommunicatorIface, NoMatchFailsConstructionListingInterfaces) {
  ScopedEnv ifname("TCCL_SOCKET_IFNAME", "=nosuch0");
  ScopedEnv noFamily("TCCL_SOCKET_FAMILY", nullptr);
  auto store = std::make_shared<HashStore>();
  try {
    Communicator comm(store, 0, 1);
    FAIL() << "constructed with an interface that does not exist";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("TCCL_SOCKET_IFNAME='=nosuch0'"), std::string::npos) << what;
    EXPECT_NE(what.find("lo 127.0.0.1"), std::string::npos) << what;
    EXPECT_EQ(e.rank(), 0);
  }
}

TEST(CommunicatorIface, BadFamilyIsAnInvalidArgument) {
  ScopedEnv fam("TCCL_SOCKET_FAMILY", "AF_IPX");
  auto store = std::make_shared<HashStore>();
  EXPECT_THROW(Communicator(store, 0, 1), InvalidArgumentError);
}

TEST(CommunicatorIface, TwoRanksOverIpv6ByAddress) {
  if (!ipv6LoopbackWorks()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  ScopedEnv ifname("TCCL_SOCKET_IFNAME", "::1");
  ScopedEnv noFamily("TCCL_SOCKET_FAMILY", nullptr);
  TcpStoreServer server("127.0.0.1", 0);  // an IPv4 store: the family follows the spec
  std::vector<std::string> addrs(2), errors(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        Communicator comm(std::make_shared<TcpStore>("127.0.0.1", server.port(), 5s), r, 2);
        std::vector<int32_t> v(257, r + 1);
        comm.allreduce(std::span<int32_t>(v), ReduceOp::Sum);
        for (int32_t x : v) {
          if (x != 3) throw std::runtime_error("wrong sum " + std::to_string(x));
        }
        addrs[static_cast<size_t>(r)] = comm.listenAddress();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(addrs[static_cast<size_t>(r)].rfind("[::1]:", 0), 0u)
        << addrs[static_cast<size_t>(r)];
  }
}

TEST(CommunicatorIface, LoopbackRefusedWhenTheStoreIsReachableFromOtherHosts) {
  const std::string ip = someNonLoopbackAddress();
  if (ip.empty()) GTEST_SKIP() << "no non-loopback IPv4 address on this machine";
  ScopedEnv noFamily("TCCL_SOCKET_FAMILY", nullptr);
  ScopedEnv optOut("TCCL_AUTH", "off");  // a non-loopback address without a key
  TcpStoreServer server(ip, 0);
  {
    ScopedEnv noIfname("TCCL_SOCKET_IFNAME", nullptr);
    // Without TCCL_SOCKET_IFNAME the route to the store decides: the same address.
    Communicator solo(std::make_shared<TcpStore>(ip, server.port(), 5s), 0, 1, named("solo"));
    EXPECT_EQ(solo.listenAddress().rfind(ip + ":", 0), 0u) << solo.listenAddress();
  }
  ScopedEnv ifname("TCCL_SOCKET_IFNAME", "=lo");
  // World of one: nobody will dial this rank, loopback is fine.
  Communicator one(std::make_shared<TcpStore>(ip, server.port(), 5s), 0, 1, named("one"));
  EXPECT_EQ(one.listenAddress().rfind("127.0.0.1:", 0), 0u) << one.listenAddress();
  // World of two: refused at construction, before anything listens.
  try {
    Communicator comm(std::make_shared<TcpStore>(ip, server.port(), 5s), 0, 2, named("two"));
    FAIL() << "listened on loopback with the store at " << ip;
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("refusing to listen on the loopback address 127.0.0.1"), std::string::npos)
        << what;
    EXPECT_NE(what.find(ip), std::string::npos) << what;
  }
}

}  // namespace

// net::sameHost (the default socket buffers' test, docs/env.md TCCL_SOCKET_BUFFER): both
// ends of a loopback connection, and of one to this host's own non-loopback address;
// never a socket that is not connected.
namespace {

void expectSameHostPair(const std::string& host) {
  SCOPED_TRACE(host);
  Fd listener = listenOn(host, 0);
  const uint16_t port = localAddress(listener.get()).port();
  Fd client = connectWithRetry(host, port, Deadline::after(5s));
  Fd server;
  for (int i = 0; i < 5000 && !server.valid(); ++i) {
    server = acceptNonBlocking(listener.get());
    if (!server.valid()) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(server.valid());
  EXPECT_TRUE(sameHost(client.get()));
  EXPECT_TRUE(sameHost(server.get()));
  EXPECT_FALSE(sameHost(listener.get())) << "a listener has no peer";
}

}  // namespace

TEST(SameHost, BothEndsOfALoopbackConnection) {
  expectSameHostPair("127.0.0.1");
  expectSameHostPair("::1");
}

TEST(SameHost, BothEndsOfAConnectionToThisHostsOwnAddress) {
  std::string own;
  for (const Interface& i : listInterfaces()) {
    if (i.up() && !i.loopback() && i.family == AF_INET) own = i.address;
  }
  if (own.empty()) GTEST_SKIP() << "no IPv4 address but loopback on this machine";
  expectSameHostPair(own);
}

TEST(SameHost, NotForASocketWithoutAPeer) {
  Fd unconnected(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(unconnected.valid());
  EXPECT_FALSE(sameHost(unconnected.get()));
  EXPECT_FALSE(sameHost(-1));
}
