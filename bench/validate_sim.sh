#!/usr/bin/env bash
# bench/validate_sim.sh: `tccl simulate` against measurements (docs/simulate.md,
# "Validation"). Prints one markdown table per part, every row with its error.
#
#   sudo bench/validate_sim.sh build/tccl [netns|loopback|all]
#
# netns: 4 hosts x 2 ranks in network namespaces (tests/netns/cluster.sh), every host's
#   link limited with tc tbf to each rate of RATES (default "100mbit 200mbit 300mbit"),
#   `tccl bench` of ring, tree, hd and hier all-reduce at SIZES (default 1M,8M,64M),
#   against `tccl simulate` of the same: 4 hosts with full-duplex NICs of the tbf rate
#   times the payload share TCP reaches through tbf, and a per-message cost, both
#   calibrated once at the first rate from a 2-host sendrecv (below); the loopback
#   figures below for the two ranks of a host.
# loopback: worlds 2 to 16 on this machine (WORLDS, default "2 4 8 16"), `tccl bench`
#   against `tccl simulate --hosts 1 --ranks-per-host N --cores (online cores)`, with
#   the per-message overhead and the per-core copy rate calibrated once from a 2-rank
#   `tccl bench --op sendrecv` (8 B: overhead; 8 MiB: copy rate) and `tccl tune`'s
#   reduction figure; the loopback link itself unlimited (the copies are CPU work).
# Needs root for the namespaces (netns part only). Heavy: not a CTest case.
set -uo pipefail
TCCL=$(readlink -f "${1:?usage: validate_sim.sh path/to/tccl [netns|loopback|all]}")
PART=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
RATES=${RATES:-"100mbit 200mbit 300mbit"}
SIZES=${SIZES:-1M,8M,64M}
WORLDS=${WORLDS:-"2 4 8 16"}
LOOP_SIZES=${LOOP_SIZES:-1M,8M,64M}
ALGOS=${ALGOS:-ring,tree,hd,hier}
TMP=$(mktemp -d /tmp/tccl-validate.XXXXXX)

# bench CSV (size,count,type,redop,root,algo,time_us,...) -> "size algo time_us" lines.
bench_rows() { awk -F, '$1 ~ /^[0-9]+$/ && NF >= 7 { sub(/^auto:/, "", $6); print $1, $6, $7 }' "$@"; }
# simulate CSV (size,count,type,algo,time_us,...) -> "size algo time_us".
sim_rows() { awk -F, '$1 ~ /^[0-9]+$/ { sub(/^auto:/, "", $4); print $1, $4, $5 }' "$@"; }

# Joins measured and simulated rows: | label | size | algo | measured | simulated | error |
report() {  # label measured-file simulated-file
  awk -v label="$1" 'NR == FNR { sim[$1 " " $2] = $3; next }
    ($1 " " $2) in sim {
      s = sim[$1 " " $2]; err = (s - $3) / $3 * 100
      printf "| %s | %d MiB | %s | %.0f | %.0f | %+.1f %% |\n", label, $1 / 1048576, $2, $3, s, err
    }' "$3" "$2"
}

rate_bits() {  # 100mbit -> 100000000
  local r=$1
  case $r in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *) echo "$r" ;;
  esac
}

# ---- calibration on loopback (both parts use it) ---------------------------------------
calibrate() {
  local out
  out=$(timeout 300 "$TCCL" bench --world 2 --op sendrecv --sizes 8,8M -n 10 -w 2 --csv --no-check 2>/dev/null)
  LOOP_OVERHEAD_US=$(awk -F, '$1 == 8 { printf "%.2f", $7 }' <<<"$out")
  # A ring shift of 2 ranks: each rank sends V and receives V at once, each on its own
  # core: time = overhead + V / copy rate. TCP over loopback is the kernel copying on the
  # ranks' cores, so the replay charges that rate as CPU per byte sent (--copy-gbps) and
  # gives the loopback link no limit of its own.
  LOOP_COPY_GBPS=$(awk -F, -v o="$LOOP_OVERHEAD_US" '$1 == 8388608 { t = $7 - o; if (t <= 0) t = $7;
    printf "%.4f", $1 / (t * 1000) }' <<<"$out")
  # tccl tune measures the reduction (gamma) among its figures; read it from its file.
  timeout 300 "$TCCL" tune --world 2 --file "$TMP/tune.conf" >/dev/null 2>&1
  REDUCE_GBPS=$(awk -F= '$1 == "gamma_gbps" { print $2 }' "$TMP/tune.conf" 2>/dev/null)
  REDUCE_GBPS=${REDUCE_GBPS:-10}
  CORES=$(nproc)
  echo "# calibration (loopback, $(date -u)): per-message overhead ${LOOP_OVERHEAD_US} us" \
    "(2-rank sendrecv of 8 B), copy rate ${LOOP_COPY_GBPS} GB/s per core (of 8 MiB), reduction" \
    "${REDUCE_GBPS} GB/s (tccl tune), ${CORES} cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# ---- netns: 4 hosts x 2 ranks over tbf-limited links -----------------------------------
netns_part() {
  # shellcheck source=../tests/netns/cluster.sh
  source "$here/../tests/netns/cluster.sh"
  cluster_require
  cluster_up 4 || { echo "cluster_up failed"; return 1; }
  local key br i rate pids=()
  key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  br=$(cluster_ns br)
  shape() {  # every host's mgmt0, both ends of its veth
    for ((i = 0; i < 4; i++)); do
      ip netns exec "$(cluster_ns "$i")" tc qdisc replace dev mgmt0 root tbf rate "$1" \
        burst 32kb latency 50ms
      ip netns exec "$br" tc qdisc replace dev "h${i}n0" root tbf rate "$1" burst 32kb latency 50ms
    done
  }
  # Calibration, once, at the first rate: a 2-rank sendrecv between hosts 0 and 1 (each
  # sends V to the other at once: full duplex) of 8 B (the per-message cost over the
  # namespaces' path, scheduling delays of this loaded machine included) and of 16 MiB
  # (the payload rate TCP reaches through tbf: below the rate, for tbf drops what exceeds
  # its 32 kB burst and TCP backs off). Their ratio to the tbf rate applies to every rate.
  local rate0 bits0 out
  rate0=${RATES%% *}
  bits0=$(rate_bits "$rate0")
  shape "$rate0"
  for ((i = 0; i < 2; i++)); do
    cluster_exec "$i" env TCCL_TUNE_FILE=/nonexistent TCCL_AUTH_KEY="$key" \
      timeout -k 5 600 "$TCCL" launch --nproc-per-node 1 --nnodes 2 --node-rank "$i" \
      --master-addr "$(cluster_addr 0)" --master-port 29500 --no-tag-output -- \
      "$TCCL" bench --op sendrecv --sizes 8,16M -n 5 -w 1 --csv --no-check \
      >"$TMP/cal.$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
  NETNS_MSG_US=$(awk -F, '$1 == 8 { printf "%.1f", $7 }' "$TMP/cal.0.log")
  NETNS_EFF=$(awk -F, -v b="$bits0" '$1 == 16777216 { printf "%.4f", $1 * 8 / ($7 / 1e6) / b }' \
    "$TMP/cal.0.log")
  echo "# netns calibration at $rate0: per-message ${NETNS_MSG_US} us (8 B sendrecv)," \
    "payload rate ${NETNS_EFF} x the tbf rate (16 MiB sendrecv)"
  echo
  echo "| rate | size | algo | measured (us) | simulated (us) | error |"
  echo "|---|---|---|---|---|---|"
  for rate in $RATES; do
    shape "$rate"
    for ((i = 0; i < 4; i++)); do
      cluster_exec "$i" env TCCL_TUNE_FILE=/nonexistent TCCL_AUTH_KEY="$key" \
        timeout -k 5 900 "$TCCL" launch --nproc-per-node 2 --nnodes 4 --node-rank "$i" \
        --master-addr "$(cluster_addr 0)" --master-port 29500 --no-tag-output -- \
        "$TCCL" bench --algo "$ALGOS" --sizes "$SIZES" -n "${ITERS:-2}" -w 1 --csv \
        >"$TMP/netns.$rate.$i.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    pids=()
    bench_rows "$TMP/netns.$rate.0.log" >"$TMP/m.$rate"
    local gbps
    gbps=$(awk -v b="$(rate_bits "$rate")" -v e="$NETNS_EFF" 'BEGIN { printf "%.6f", b * e / 1e9 }')
    "$TCCL" simulate --hosts 4 --ranks-per-host 2 --cores "$CORES" --gbps "$gbps" \
      --latency-us 0 --loopback-gbps 10000 --loopback-latency-us 0 \
      --copy-gbps "$LOOP_COPY_GBPS" --overhead-us "$NETNS_MSG_US" --reduce-gbps "$REDUCE_GBPS" --sizes "$SIZES" \
      --algo "$ALGOS" --csv 2>/dev/null | sim_rows >"$TMP/s.$rate"
    report "$rate" "$TMP/m.$rate" "$TMP/s.$rate"
  done
  cluster_down
}

# ---- loopback: worlds 2 to 16 on this machine ------------------------------------------
loopback_part() {
  echo
  echo "| world | size | algo | measured (us) | simulated (us) | error |"
  echo "|---|---|---|---|---|---|"
  local n algos
  for n in $WORLDS; do
    algos=ring,tree,hd
    TCCL_TUNE_FILE=/nonexistent timeout 900 "$TCCL" bench --world "$n" --algo "$algos" \
      --sizes "$LOOP_SIZES" -n 3 -w 1 --csv >"$TMP/loop.$n.log" 2>/dev/null
    bench_rows "$TMP/loop.$n.log" >"$TMP/lm.$n"
    "$TCCL" simulate --hosts 1 --ranks-per-host "$n" --cores "$CORES" \
      --loopback-gbps 10000 --loopback-latency-us 0 --copy-gbps "$LOOP_COPY_GBPS" \
      --overhead-us "$LOOP_OVERHEAD_US" \
      --reduce-gbps "$REDUCE_GBPS" --sizes "$LOOP_SIZES" --algo "$algos" --csv 2>/dev/null |
      sim_rows >"$TMP/ls.$n"
    report "$n" "$TMP/lm.$n" "$TMP/ls.$n"
  done
}

calibrate
case $PART in
  netns) netns_part ;;
  loopback) loopback_part ;;
  all) netns_part; loopback_part ;;
  *) echo "unknown part $PART (netns, loopback, all)"; exit 2 ;;
esac
rm -rf "$TMP"
