#!/usr/bin/env bash
# run-example.sh - install dependencies, build stpar and run it on the
# bundled example.
#
# The `stpar` driver (ONNX import -> search -> partition -> emit) does not
# exist yet; until it does, the main job this runs is stpar-opt on
# examples/megatron-mlp-2xdgx.mlir: it parses and verifies the hand-written
# partition plan (cluster, mesh, partition specs), prints it back, and
# reports which link levels each mesh axis crosses.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
export CCACHE_BASEDIR="$root"

"$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j 2 --target stpar-opt
echo "=== stpar-opt examples/megatron-mlp-2xdgx.mlir --stp-print-mesh-placement"
"$build_dir/bin/stpar-opt" "$root/examples/megatron-mlp-2xdgx.mlir" \
  --stp-print-mesh-placement --mlir-print-op-on-diagnostic=false
