#!/usr/bin/env bash
# bench/whatif_sim.sh: the what-if tables of docs/PERFORMANCE.md from `tccl simulate`.
#
#   bench/whatif_sim.sh build/tccl [WORLDS] [SIZES] [ALGOS]
#
# For each world (default "64 1024 4096"), NIC rate (25 and 100 Gb/s) and ranks per host
# (1 and 8): one star switch, 5 us host to host, loopback 64 Gb/s 1 us, a core per rank,
# reduction 20 GB/s per core; every algorithm of ALGOS (default ring,tree,hd,hier,auto)
# at SIZES (default 64K,1M,16M,64M). Prints tccl simulate's CSV with a config prefix:
#   world,gbps,ranks_per_host,size,count,type,algo,time_us,algbw,busbw,bytes_per_rank,
#   messages,wall_s
# and the auto lines as comments. Hier at one rank per host is the ring: skipped there.
set -uo pipefail
TCCL=${1:?usage: whatif_sim.sh path/to/tccl [worlds] [sizes] [algos]}
WORLDS=${2:-"64 1024 4096"}
SIZES=${3:-64K,1M,16M,64M}
ALGOS=${4:-ring,tree,hd,hier,auto}
EXTRA=${EXTRA:-}  # e.g. --no-replay-auto
for n in $WORLDS; do
  for gbps in 25 100; do
    for rph in 1 8; do
      algos=$ALGOS
      [ "$rph" = 1 ] && algos=$(tr ',' '\n' <<<"$ALGOS" | grep -v '^hier$' | paste -sd,)
      "$TCCL" simulate --world "$n" --ranks-per-host "$rph" --gbps "$gbps" --latency-us 5 \
        --loopback-gbps 64 --loopback-latency-us 1 --reduce-gbps 20 --sizes "$SIZES" \
        --algo "$algos" --csv $EXTRA 2>&1 | awk -v p="$n,$gbps,$rph" '/^[0-9]/ { print p "," $0; next }
          /auto picks/ { print "# " p ": " $0 }'
    done
  done
done
