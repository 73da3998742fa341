# shellcheck shell=bash
# common.sh: helpers shared by bench/compare_mpi.sh and bench/compare_p2p.sh (sourced).
# The caller defines log() and sets TIMEOUT, QUIET_IDLE, QUIET_WAIT, BUILD_DIR and MPIRUN.

# CPU idle % (all CPUs) over half a second, from /proc/stat.
idle_pct() {
  local a b tot=0 i
  read -r -a a </proc/stat
  sleep 0.5
  read -r -a b </proc/stat
  for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  if ((tot <= 0)); then echo 100; else echo $((100 * (b[4] - a[4] + b[5] - a[5]) / tot)); fi
}
# Waits (up to QUIET_WAIT s) for the machine to be QUIET_IDLE % idle; sets IDLE.
IDLE=100
wait_quiet() {
  IDLE=$(idle_pct)
  ((QUIET_WAIT > 0)) || return 0
  local t0=$SECONDS
  while ((IDLE < QUIET_IDLE && SECONDS - t0 < QUIET_WAIT)); do
    sleep 1
    IDLE=$(idle_pct)
  done
  ((IDLE >= QUIET_IDLE)) || log "machine still busy (${IDLE}% idle) after ${QUIET_WAIT}s; measuring anyway"
}
# Every process a script runs has a hard limit (TIMEOUT seconds, then SIGKILL 10 s later).
run_limited() { timeout -k 10 "$TIMEOUT" "$@"; }

bytes_of() { # 64M -> 67108864
  local s=$1 m=1
  case $s in *K | *k) m=1024; s=${s%?} ;; *M | *m) m=$((1 << 20)); s=${s%?} ;; *G | *g) m=$((1 << 30)); s=${s%?} ;; esac
  echo $((s * m))
}

# Builds the tccl CLI (Release) in BUILD_DIR unless TCCL names a binary; sets TCCL.
build_tccl() {
  mkdir -p "$BUILD_DIR"
  if [[ -z ${TCCL:-} ]]; then
    log "building tccl (Release) in $BUILD_DIR"
    local gen=()
    if command -v ninja >/dev/null; then gen=(-G Ninja); fi
    run_limited cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTCCL_BUILD_TESTS=OFF >/dev/null
    run_limited cmake --build "$BUILD_DIR" --target tccl_cli >/dev/null 2>&1 ||
      run_limited cmake --build "$BUILD_DIR" >/dev/null
    TCCL=$BUILD_DIR/tccl
  fi
  [[ -x $TCCL ]] || { log "no tccl binary at $TCCL"; exit 1; }
}

machine_info() {
  echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
  echo "- Open MPI: $("$MPIRUN" --version 2>/dev/null | head -1)"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}
