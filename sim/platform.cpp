#include "sim/platform.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <simgrid/s4u.hpp>

#include "tccl/error.hpp"

namespace sg4 = simgrid::s4u;

namespace tccl::sim {
namespace {

[[noreturn]] void invalid(const std::string& what) {
  throwError(ErrorKind::InvalidArgument, "simulate: " + what);
}

// "2;4,4;1,2;1,2" -> FatTreeParams, checked here so that SimGrid's own checks (which
// abort the process) never see a malformed one.
sg4::FatTreeParams parseFatTree(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ';') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  auto number = [&](const std::string& s) -> unsigned {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        })) {
      invalid("fat tree \"" + text + "\": \"" + s + "\" is not a number in [1, 999999]");
    }
    const unsigned v = static_cast<unsigned>(std::stoul(s));
    if (v == 0) invalid("fat tree \"" + text + "\": counts must be at least 1");
    return v;
  };
  if (parts.size() != 4) invalid("fat tree \"" + text + "\" is not levels;down;up;count");
  const unsigned levels = number(parts[0]);
  if (levels > 8) invalid("fat tree \"" + text + "\": at most 8 levels");
  std::vector<std::vector<unsigned>> lists;
  for (size_t p = 1; p < 4; ++p) {
    std::vector<unsigned> v;
    size_t s = 0;
    const std::string& item = parts[p];
    for (size_t i = 0; i <= item.size(); ++i) {
      if (i == item.size() || item[i] == ',') {
        v.push_back(number(item.substr(s, i - s)));
        s = i + 1;
      }
    }
    if (v.size() != levels) {
      invalid("fat tree \"" + text + "\": every list needs " + std::to_string(levels) + " items");
    }
    lists.push_back(v);
  }
  return sg4::FatTreeParams(levels, lists[0], lists[1], lists[2]);
}

sg4::Host* makeHost(sg4::NetZone* zone, int i, const ClusterSpec& spec) {
  return zone->create_host("host-" + std::to_string(i), 1.0)->set_core_count(spec.cores)->seal();
}

sg4::Link* makeLoopback(sg4::NetZone* zone, unsigned long i, const ClusterSpec& spec) {
  return zone->create_link("loopback-" + std::to_string(i), spec.loopbackBytesPerSec)
      ->set_latency(spec.loopbackLatencySec)
      ->seal();
}

std::vector<sg4::Host*> buildStar(const ClusterSpec& spec) {
  sg4::NetZone* zone = sg4::create_star_zone("cluster");
  std::vector<sg4::Host*> hosts;
  hosts.reserve(static_cast<size_t>(spec.hosts));
  for (int i = 0; i < spec.hosts; ++i) {
    sg4::Host* h = makeHost(zone, i, spec);
    sg4::Link* nic = zone->create_split_duplex_link("nic-" + std::to_string(i), spec.nicBytesPerSec)
                         ->set_latency(spec.latencySec / 2)
                         ->seal();
    // Out of the host through the NIC's up half; the symmetric route (into the host)
    // takes its down half.
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(nic, sg4::LinkInRoute::Direction::UP)}, true);
    sg4::Link* lo = makeLoopback(zone, static_cast<unsigned long>(i), spec);
    zone->add_route(h->get_netpoint(), h->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(lo)},
                    false);
    hosts.push_back(h);
  }
  zone->seal();
  return hosts;
}

std::vector<sg4::Host*> buildFatTree(const ClusterSpec& spec) {
  const sg4::FatTreeParams params = parseFatTree(spec.fatTree);
  long leaves = 1;
  for (unsigned d : params.down) leaves *= d;
  if (leaves > 1 << 20) invalid("fat tree \"" + spec.fatTree + "\" has over 2^20 leaves");
  if (spec.hosts > 0 && leaves != spec.hosts) {
    invalid("fat tree \"" + spec.fatTree + "\" has " + std::to_string(leaves) +
            " leaves (the product of its down counts), not --hosts " + std::to_string(spec.hosts));
  }
  std::vector<sg4::Host*> hosts(static_cast<size_t>(leaves), nullptr);
  auto netpoint = [&](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
    sg4::Host* h = makeHost(zone, static_cast<int>(id), spec);
    hosts[id] = h;
    return std::make_pair(h->get_netpoint(),
                          static_cast<simgrid::kernel::routing::NetPoint*>(nullptr));
  };
  auto loopback = [&](sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
    return makeLoopback(zone, id, spec);
  };
  sg4::NetZone* zone = sg4::create_fatTree_zone(
      "cluster", nullptr, params, sg4::ClusterCallbacks(netpoint, loopback, {}),
      spec.nicBytesPerSec, spec.latencySec / (2.0 * params.levels),
      sg4::Link::SharingPolicy::SPLITDUPLEX);
  zone->seal();
  return hosts;
}

}  // namespace

void startEngine(const std::vector<std::string>& extraConfig) {
  static sg4::Engine* engine = nullptr;
  if (engine) return;
  std::vector<std::string> args = {"tccl-simulate",
                                   "--log=root.thresh:warning",
                                   "--cfg=network/model:CM02",
                                   "--cfg=network/TCP-gamma:0",
                                   "--cfg=network/crosstraffic:0",
                                   "--cfg=network/weight-S:0",
                                   "--cfg=contexts/stack-size:256"};
  for (const std::string& c : extraConfig) args.push_back("--cfg=" + c);
  static std::vector<std::string> keep;  // the engine may keep pointers into argv
  keep = args;
  static std::vector<char*> argv;
  for (std::string& s : keep) argv.push_back(s.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(keep.size());
  engine = new sg4::Engine(&argc, argv.data());  // lives as long as the process
}

bool naturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      // Skip leading zeros, then the longer run is the larger number.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<sg4::Host*> buildCluster(const ClusterSpec& spec) {
  if (spec.cores < 1) invalid("cores must be at least 1");
  if (!(spec.nicBytesPerSec > 0) || !(spec.loopbackBytesPerSec > 0)) {
    invalid("bandwidths must be positive");
  }
  if (!(spec.latencySec >= 0) || !(spec.loopbackLatencySec >= 0)) {
    invalid("latencies must not be negative");
  }
  if (spec.fatTree.empty()) {
    if (spec.hosts < 1) invalid("a cluster needs at least one host");
    return buildStar(spec);
  }
  return buildFatTree(spec);
}

std::vector<sg4::Host*> loadPlatform(const std::string& path) {
  sg4::Engine::get_instance()->load_platform(path);
  std::vector<sg4::Host*> hosts = sg4::Engine::get_instance()->get_all_hosts();
  std::sort(hosts.begin(), hosts.end(), [](const sg4::Host* x, const sg4::Host* y) {
    return naturalLess(x->get_name(), y->get_name());
  });
  if (hosts.empty()) invalid("platform " + path + " has no host");
  return hosts;
}

RankPlacement placeRanks(const std::vector<sg4::Host*>& hosts, int world, int ranksPerHost) {
  if (world < 1 || ranksPerHost < 1) invalid("world and ranks per host must be at least 1");
  const int needed = (world + ranksPerHost - 1) / ranksPerHost;
  if (needed > static_cast<int>(hosts.size())) {
    invalid(std::to_string(world) + " ranks at " + std::to_string(ranksPerHost) +
            " per host need " + std::to_string(needed) + " hosts; the platform has " +
            std::to_string(hosts.size()));
  }
  RankPlacement p;
  std::vector<int> sizes;
  for (int r = 0; r < world; ++r) {
    p.hostOfRank.push_back(hosts[static_cast<size_t>(r / ranksPerHost)]);
    if (r % ranksPerHost == 0) sizes.push_back(0);
    ++sizes.back();
  }
  p.layout = algo::HostLayout::contiguous(sizes);
  return p;
}

int coreCount(const sg4::Host* host) { return host->get_core_count(); }

RouteFigures routeBetween(sg4::Host* from, sg4::Host* to) {
  std::vector<sg4::Link*> links;
  double latency = 0;
  from->route_to(to, links, &latency);
  RouteFigures f;
  f.latencySec = latency;
  f.bytesPerSec = std::numeric_limits<double>::infinity();
  for (const sg4::Link* l : links) f.bytesPerSec = std::min(f.bytesPerSec, l->get_bandwidth());
  return f;
}

}  // namespace tccl::sim
