#!/usr/bin/env bash
# run-example.sh - install dependencies, build stpar and run its main job on
# the bundled example.
#
# The example model is made by the project itself: a small GPT (4 layers,
# hidden 512, 8 heads, vocabulary 5000, sequence 256) from python/stpar-zoo,
# graph only, weights absent. The job, on one DGX A100 node (8 GPUs):
#   1. stpar import      ONNX -> MLIR with static shapes
#   2. stpar-opt --stp-normalize   recognize layer norm / GELU / attention
#   3. stpar plan        search the partition plan of a training step and
#                        compare it with Megatron and ZeRO baselines; writes
#                        plan.json and plan.mlir (stp.mesh / stp.spec)
#   4. stpar cost        cost one step of a hand-written Megatron plan
#                        (tp=2, pp=2, dp=2, micro-batch 4, global batch 64)
# Outputs go to build/example/. `stpar compile` (partitioning and code
# emission) is the next stage; see README.md for its status.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
out="$build_dir/example"
export CCACHE_BASEDIR="$root"

"$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j 2 --target stpar stpar-opt
mkdir -p "$out"

echo "=== python/stpar-zoo generate custom --arch gpt ... -o $out/gpt-small.onnx"
/usr/bin/python3 "$root/python/stpar-zoo" generate custom --arch gpt \
  --layers 4 --hidden 512 --heads 8 --vocab 5000 --seq 256 \
  -o "$out/gpt-small.onnx"

dims=(--dim batch_size=4 --dim seq_len=256)
echo "=== stpar import $out/gpt-small.onnx ${dims[*]} -o $out/gpt-small.mlir"
"$build_dir/bin/stpar" import "$out/gpt-small.onnx" "${dims[@]}" \
  -o "$out/gpt-small.mlir"

echo "=== stpar-opt --stp-normalize $out/gpt-small.mlir -o $out/gpt-small.norm.mlir"
"$build_dir/bin/stpar-opt" --stp-normalize "$out/gpt-small.mlir" \
  -o "$out/gpt-small.norm.mlir"
echo "composites: $(grep -c 'stp.layer_norm' "$out/gpt-small.norm.mlir") layer norms," \
  "$(grep -c 'stp.attention' "$out/gpt-small.norm.mlir") attentions," \
  "$(grep -c 'stp.composite = "gelu"' "$out/gpt-small.norm.mlir") GELUs"

echo "=== stpar plan $out/gpt-small.onnx ${dims[*]} --cluster dgx-a100-80g-1 --devices 8 --compare -o $out/plan.json --emit-mlir $out/plan.mlir"
"$build_dir/bin/stpar" plan "$out/gpt-small.onnx" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --devices 8 --compare \
  -o "$out/plan.json" --emit-mlir "$out/plan.mlir"

echo "=== stpar cost $out/gpt-small.onnx ${dims[*]} --cluster dgx-a100-80g-1 --strategy megatron:tp=2,pp=2,dp=2,mb=4,gb=64"
"$build_dir/bin/stpar" cost "$out/gpt-small.onnx" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --strategy megatron:tp=2,pp=2,dp=2,mb=4,gb=64

echo "=== wrote, in $out:"
echo "  gpt-small.onnx       the example model (graph only; weights absent)"
echo "  gpt-small.mlir       its import (stpar import)"
echo "  gpt-small.norm.mlir  after -stp-normalize"
echo "  plan.json            the partition plan (docs/plan-format.md)"
echo "  plan.mlir            the IR with stp.mesh and stp.spec attributes"
