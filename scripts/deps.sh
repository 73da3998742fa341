#!/usr/bin/env bash
# Installs the Debian packages tccl needs, only those missing (needs root or sudo).
# Usage: scripts/deps.sh build|test
set -euo pipefail
want=(cmake ninja-build g++ make libssl-dev)  # libssl-dev: libcrypto for the handshake HMAC
want+=(pkg-config libsimgrid-dev)  # tccl simulate (sim/, docs/simulate.md); optional, found by CMake
if [ "${1:-build}" = test ]; then
  want+=(libgtest-dev python3)  # python3: the CLI tests check JSON and SVG output with it
  want+=(iproute2)  # ip, tc, ss: tests/netns builds a cluster of network namespaces
  # The Python package and torch backend (python/, tests/python): built when found.
  want+=(pybind11-dev python3-dev python3-numpy python3-pytest python3-torch libtorch-dev)
  want+=(librsvg2-bin)  # rsvg-convert: tccl bench --plot FILE.png (tests/cli)
  want+=(openmpi-bin)  # mpirun: tests/cli/launch_test.sh starts a tccl program under Open MPI
  # clang and its runtimes (libFuzzer, ASan, UBSan): scripts/fuzz.sh
  want+=(clang-14 libclang-rt-14-dev)
fi
missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tccl: installing missing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
