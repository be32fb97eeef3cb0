#!/usr/bin/env bash
# run-example.sh - install dependencies, build stpar and run its main job on
# the bundled example.
#
# The example model is made by the project itself: a small GPT (4 layers,
# hidden 256, 8 heads, vocabulary 1000, sequence 128) from python/stpar-zoo
# with seeded random weights. The job, on one DGX A100 node (8 GPUs):
#   1. stpar compile --loss next-token --optimizer adamw
#                        import, search the partition plan of a training
#                        step, build the training step (loss, backward pass,
#                        AdamW update; docs/training.md), partition it into
#                        the per-rank SPMD program and emit it for CUDA
#                        (NCCL, cuBLAS) and CPU (MPI); prints the plan table
#                        and writes build/example/out/{plan.json, plan.txt,
#                        plan.html, planned.mlir, training.mlir,
#                        partitioned.mlir, cuda/, cpu/}
#   2. stpar plan --compare   the same plan beside the Megatron, ZeRO and
#                        spatial-only baselines; its page, baselines
#                        included, is build/example/plan.html
#   3. stpar verify --train   builds and runs the CPU program of step 1 on
#                        its 8 MPI ranks for 2 training steps and compares
#                        the loss, every gradient and every updated
#                        parameter with PyTorch autograd on the
#                        unpartitioned model
#   4. stpar verify      the forward pass alone against ONNX Runtime

set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
out="$build_dir/example"
export CCACHE_BASEDIR="$root"

"$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j 2 --target stpar stpar-opt
mkdir -p "$out"

model="$out/gpt-small.onnx"
echo "=== python/stpar-zoo generate custom --arch gpt ... --weights random -o $model"
/usr/bin/python3 "$root/python/stpar-zoo" generate custom --arch gpt \
  --layers 4 --hidden 256 --heads 8 --ffn 1024 --vocab 1000 --seq 128 \
  --weights random -o "$model"

dims=(--dim batch_size=8 --dim seq_len=128)
train=(--loss next-token --optimizer adamw --lr 1e-3)
echo "=== stpar compile $model ${dims[*]} --cluster dgx-a100-80g-1 --devices 8 ${train[*]} -o $out/out"
"$build_dir/bin/stpar" compile "$model" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --devices 8 "${train[@]}" --return-gradients \
  -o "$out/out"

echo "=== stpar plan $model ${dims[*]} --cluster dgx-a100-80g-1 --devices 8 --compare --html $out/plan.html"
"$build_dir/bin/stpar" plan "$model" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --devices 8 --compare --html "$out/plan.html" 2>/dev/null | \
  sed -n '/^comparison/,$p'

echo "=== stpar verify $model ${dims[*]} --cluster dgx-a100-80g-1 --compiled $out/out --train --steps 2 ${train[*]}"
"$build_dir/bin/stpar" verify "$model" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --compiled "$out/out" --train --steps 2 \
  "${train[@]}" | grep -E "loss|summary|FAIL"
echo "=== stpar verify $model ${dims[*]} --cluster dgx-a100-80g-1 --devices 8 (forward pass)"
"$build_dir/bin/stpar" verify "$model" "${dims[@]}" \
  --cluster dgx-a100-80g-1 --devices 8

echo "=== wrote, in $out:"
echo "  gpt-small.onnx(.data)   the example model and its random weights"
echo "  out/plan.txt            the plan table (as printed above)"
echo "  out/plan.json           the partition plan (docs/plan-format.md)"
echo "  out/plan.html           the plan as a page; plan.html: with the baselines"
echo "  out/planned.mlir        the IR with stp.mesh and stp.spec"
echo "  out/training.mlir       the training step (loss, backward, AdamW;"
echo "                          docs/training.md)"
echo "  out/partitioned.mlir    the per-device SPMD program (docs/spmd-ir.md)"
echo "  out/cuda/, out/cpu/     per-rank CUDA/NCCL and C++/MPI programs"
echo "                          (docs/emitted-code.md)"
