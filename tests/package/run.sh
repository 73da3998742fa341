#!/usr/bin/env bash
# Installs the built tccl into a scratch prefix, then configures, builds and runs a
# separate CMake project that finds it with find_package(tccl).
set -euo pipefail
build_dir=$1
src_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build_dir" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src_dir/tests/package/consumer" -B "$scratch/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/build" >/dev/null
timeout 60 "$scratch/build/consumer"
test -x "$scratch/prefix/bin/tccl"
