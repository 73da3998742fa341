#!/usr/bin/env bash
# Builds tccl (Release) and runs the lab's demo: 8 worker processes, ring vs naive.
# Extra arguments go to `tccl demo` (e.g. --world 4 --size 1000000 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DTCCL_BUILD_TESTS=OFF >/dev/null
cmake --build build-release --target tccl_cli >/dev/null
exec ./build-release/tccl demo "$@"  # 8 ranks unless --world says otherwise
