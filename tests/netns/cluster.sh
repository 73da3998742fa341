# shellcheck shell=bash
# tests/netns/cluster.sh: a small cluster of "hosts" made of Linux network namespaces.
# Source it from bash; needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2.
#
#   cluster_require            exit 77 (CTest's "skipped") with a reason when namespaces,
#                              veth pairs or bridges cannot be made here
#   cluster_up H               H hosts, each its own namespace with two interfaces:
#                                mgmt0  10.213.0.(10+i)/24  on bridge br0 (the store's net)
#                                data0  10.213.1.(10+i)/24  on bridge br1 (a second net)
#                              and a stranger namespace (not a host of the job) with the
#                              same two interfaces at .250. The bridges live in a namespace
#                              of their own: the machine's own network is never touched.
#   cluster_ns I               namespace of host I ("x": the stranger)
#   cluster_addr I [NET]       host I's IPv4 address on net NET (0: mgmt0, 1: data0)
#   cluster_addr6 I [NET]      its IPv6 address (fd00:213:NET::(10+I)/64, unique local)
#   cluster_exec I CMD...      run CMD inside host I's namespace
#   cluster_bytes I IFACE      "tx rx" byte counters of IFACE inside host I
#   cluster_shape RATE [IFACE] rate-limit every host's IFACE (default mgmt0) in both
#                              directions with tc tbf (egress of both veth ends)
#   cluster_shape_flows RATE KEY... a per-flow rate limit: host i's mgmt0 egress gets an htb
#                              with 64 classes of RATE each, and every TCP packet goes to the
#                              class of its port KEY[i] (sport or dport: the connection's
#                              ephemeral end, the dialler's port) mod 64. So each connection
#                              is limited to RATE, whatever else runs (this kernel has u32
#                              but neither the flow classifier nor fq); packets under 128
#                              bytes (ACKs) pass unlimited
#   cluster_class_bytes I      "classid bytes" per htb class of host I's mgmt0
#   cluster_down               delete every namespace this shell created (the EXIT, INT
#                              and TERM traps call it, so a failing test cleans up too)
#
# Names: tcclh<pid>-<i> for host i, tcclh<pid>-x for the stranger, tcclh<pid>-br for the
# bridges, so concurrent runs never collide; namespaces left by a run that was killed
# with SIGKILL (its pid gone) are deleted by the next cluster_up. Addresses come from
# 10.213.0.0/23 and fd00:213::/48 (unique local), used only inside these namespaces.

CLUSTER_PREFIX="tcclh$$"
CLUSTER_HOSTS=0
CLUSTER_CREATED=()

cluster_ns() { echo "${CLUSTER_PREFIX}-$1"; }

cluster_addr() {  # host [net]
  local net=${2:-0}
  if [ "$1" = x ]; then echo "10.213.${net}.250"; else echo "10.213.${net}.$((10 + $1))"; fi
}

cluster_addr6() {  # host [net], in canonical form (as the tools print it)
  local net=${2:-0} pre=fd00:213:
  [ "$net" = 0 ] || pre="fd00:213:${net}:"
  if [ "$1" = x ]; then echo "${pre}:250"; else echo "${pre}:$((10 + $1))"; fi
}

cluster_exec() {  # host cmd...
  local ns
  ns=$(cluster_ns "$1")
  shift
  ip netns exec "$ns" "$@"
}

cluster_bytes() {  # host iface -> "tx rx"
  local ns
  ns=$(cluster_ns "$1")
  ip netns exec "$ns" cat "/sys/class/net/$2/statistics/tx_bytes" \
    "/sys/class/net/$2/statistics/rx_bytes" | tr '\n' ' '
  echo
}

# Kills what still runs inside our namespaces (only processes this test started can be
# there), then deletes the namespaces; their veths and bridges go with them.
cluster_down() {
  local ns pids
  for ns in "${CLUSTER_CREATED[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  for ns in "${CLUSTER_CREATED[@]}"; do
    ip netns del "$ns" 2>/dev/null
  done
  CLUSTER_CREATED=()
}

cluster_trap() {
  trap 'cluster_down' EXIT
  trap 'cluster_down; exit 130' INT
  trap 'cluster_down; exit 143' TERM
}

# Namespaces of an earlier run whose shell is gone (killed before its trap ran).
cluster_reap_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^tcclh[0-9]+-'); do
    pid=${ns#tcclh}
    pid=${pid%%-*}
    if [ "$pid" != "$$" ] && ! kill -0 "$pid" 2>/dev/null; then
      local p
      p=$(ip netns pids "$ns" 2>/dev/null)
      # shellcheck disable=SC2086
      [ -n "$p" ] && kill -KILL $p 2>/dev/null
      ip netns del "$ns" 2>/dev/null
    fi
  done
}

cluster_skip() {
  echo "SKIPPED: $*"
  exit 77
}

cluster_require() {
  command -v ip >/dev/null || cluster_skip "iproute2's ip is not installed (apt-get install iproute2)"
  local probe="${CLUSTER_PREFIX}-probe" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    cluster_skip "cannot create network namespaces here (ip netns add: ${err:-failed});" \
      "run as root or with CAP_NET_ADMIN and CAP_SYS_ADMIN, outside a restricted container"
  fi
  if ! err=$(ip -n "$probe" link add tcclprobe0 type veth peer name tcclprobe1 2>&1) ||
    ! err=$(ip -n "$probe" link add tcclprobebr type bridge 2>&1); then
    ip netns del "$probe" 2>/dev/null
    cluster_skip "cannot create veth pairs or bridges in a namespace here: $err"
  fi
  ip netns del "$probe"
}

cluster_add_ns() {
  ip netns add "$1" || return 1
  CLUSTER_CREATED+=("$1")
  ip -n "$1" link set lo up
}

# One host (or the stranger) with an interface on each bridge.
cluster_add_host() {  # id
  local id=$1 ns br net
  ns=$(cluster_ns "$id")
  br=$(cluster_ns br)
  cluster_add_ns "$ns" || return 1
  for net in 0 1; do
    local inside=mgmt0 outside="h${id}n${net}"
    [ "$net" = 1 ] && inside=data0
    ip -n "$br" link add "$outside" type veth peer name "$inside" netns "$ns" || return 1
    ip -n "$br" link set "$outside" master "br${net}" up || return 1
    ip -n "$ns" addr add "$(cluster_addr "$id" "$net")/24" dev "$inside" || return 1
    # nodad: usable at once instead of after duplicate address detection (~1-2 s).
    ip -n "$ns" addr add "$(cluster_addr6 "$id" "$net")/64" dev "$inside" nodad || return 1
    ip -n "$ns" link set "$inside" up || return 1
  done
}

cluster_up() {  # hosts
  CLUSTER_HOSTS=$1
  cluster_trap
  cluster_reap_stale
  local br i
  br=$(cluster_ns br)
  cluster_add_ns "$br" || return 1
  for i in 0 1; do
    ip -n "$br" link add "br$i" type bridge || return 1
    # No spanning tree: ports forward at once instead of after the listening delay.
    ip -n "$br" link set "br$i" type bridge stp_state 0 forward_delay 0 || return 1
    ip -n "$br" link set "br$i" up || return 1
  done
  for ((i = 0; i < CLUSTER_HOSTS; i++)); do cluster_add_host "$i" || return 1; done
  cluster_add_host x || return 1
  # Bridge ports forward at once (no STP); wait until every veth reports carrier.
  local tries=0
  # (grep -c reads to the end: grep -q could SIGPIPE ip, which pipefail reports.)
  while [ "$(ip -n "$br" -o link show type veth | grep -c 'NO-CARRIER\|state DOWN')" != 0 ]; do
    tries=$((tries + 1))
    [ $tries -gt 100 ] && { echo "cluster: links did not come up" >&2; return 1; }
    sleep 0.05
  done
}

cluster_shape_flows() {  # rate key-of-host-0 key-of-host-1 ...
  local rate=$1 i=0 key c
  shift
  for key in "$@"; do
    {
      echo "qdisc add dev mgmt0 root handle 1: htb default 1"
      echo "class add dev mgmt0 parent 1: classid 1:1 htb rate 10gbit quantum 60000"
      # Packets under 128 bytes (pure ACKs) skip the limit: queued behind the other
      # direction's data in a connection's class they would stretch its RTT to seconds.
      echo "filter add dev mgmt0 parent 1: protocol ip prio 1 u32 match u16 0 0xff80 at 2 flowid 1:1"
      for ((c = 0; c < 64; c++)); do
        printf 'class add dev mgmt0 parent 1: classid 1:%x htb rate %s ceil %s quantum 1514\n' \
          $((0x100 + c)) "$rate" "$rate"
        printf 'filter add dev mgmt0 parent 1: protocol ip prio 2 u32 match ip protocol 6 0xff match ip %s %d 0x3f flowid 1:%x\n' \
          "$key" "$c" $((0x100 + c))
      done
    } | ip netns exec "$(cluster_ns "$i")" tc -batch - || return 1
    i=$((i + 1))
  done
}

cluster_class_bytes() {  # host
  ip netns exec "$(cluster_ns "$1")" tc -s class show dev mgmt0 |
    awk '$1 == "class" { id = $3 } $1 == "Sent" { print id, $2 }'
}

cluster_shape() {  # rate [iface]
  local rate=$1 iface=${2:-mgmt0} i br net=0
  [ "$iface" = data0 ] && net=1
  br=$(cluster_ns br)
  for ((i = 0; i < CLUSTER_HOSTS; i++)); do
    # Host egress on its own end, host ingress on the bridge's end of the veth.
    ip netns exec "$(cluster_ns "$i")" tc qdisc add dev "$iface" root tbf rate "$rate" \
      burst 32kb latency 50ms || return 1
    ip netns exec "$br" tc qdisc add dev "h${i}n${net}" root tbf rate "$rate" \
      burst 32kb latency 50ms || return 1
  done
}
