#!/usr/bin/env bash
# gpu-train-check.sh - on a machine with one NVIDIA GPU: build and run the
# one-rank CUDA training step of the bundled example, check it against the
# CPU twin and PyTorch, and print per-op times next to the plan's
# predictions (docs/training.md, "On a GPU").
#
#   scripts/gpu-train-check.sh [--steps N] [--cluster C] [--precision fp32|mixed]
#
# Needs what scripts/install-deps.sh installs, plus CUDA 13 (nvcc, cuBLAS)
# and NCCL under /usr/local/cuda (or NCCL_HOME) and one visible GPU. Steps:
#   1. build stpar; generate the example (the GPT of scripts/run-example.sh)
#   2. stpar compile --devices 1 --loss next-token --optimizer adamw
#      --return-gradients [--precision mixed]: cpu/ and cuda/ of the same
#      partitioned step (mixed: bf16 GEMM operands, fp32 accumulation, so
#      the checks below use rtol 2e-2 against PyTorch and 1e-2 between the
#      two programs, which round at the same points)
#   3. build both programs (cmake; cuda: nvcc for sm_80/sm_90)
#   4. the CUDA program and the CPU program, each for N steps, against
#      PyTorch autograd (tools/torch-ref/stpar-train-ref.py verify), then
#      the two programs' step-1 outputs against each other
#   5. the CUDA program once more with STPAR_PROFILE=1 (after a warm-up
#      run): per-op times, summed per ONNX node and phase, next to the
#      plan's per-operator phase times (plan.json), and the step total
#      next to the plan's step time
# Everything goes to build/gpu-check/. Exit 0 only when every check passes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
out="$build_dir/gpu-check"
steps=2
cluster=dgx-a100-80g-1
precision=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --cluster) cluster="$2"; shift ;;
    --precision) precision="$2"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu-train-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

case "$precision" in
  fp32) rtol=1e-4; pair_rtol=1e-4 ;;
  mixed) rtol=2e-2; pair_rtol=1e-2 ;;
  *) echo "gpu-train-check: --precision must be fp32 or mixed" >&2; exit 2 ;;
esac

export CCACHE_BASEDIR="$root"
export PATH="/usr/local/cuda/bin:$PATH"
if ! command -v nvcc >/dev/null 2>&1; then
  echo "gpu-train-check: error: nvcc not found (CUDA 13 under /usr/local/cuda)" >&2
  exit 1
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-train-check: error: no NVIDIA GPU visible (nvidia-smi -L)" >&2
  exit 1
fi
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)

phase() { echo "=== $*"; }

phase "1. build stpar, generate the example"
"$root/scripts/install-deps.sh"
cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j 2 --target stpar stpar-opt
rm -rf "$out"
mkdir -p "$out"
model="$out/gpt-small.onnx"
/usr/bin/python3 "$root/python/stpar-zoo" generate custom --arch gpt \
  --layers 4 --hidden 256 --heads 8 --ffn 1024 --vocab 1000 --seq 128 \
  --weights random -o "$model"
dims=(--dim batch_size=8 --dim seq_len=128)
train=(--loss next-token --optimizer adamw --lr 1e-3)

phase "2. stpar compile (one device, training step)"
"$build_dir/bin/stpar" compile "$model" "${dims[@]}" --cluster "$cluster" \
  --devices 1 "${train[@]}" --return-gradients --precision "$precision" \
  -o "$out/compiled" >"$out/plan.txt"

phase "3. build the cuda and cpu programs"
for target in cuda cpu; do
  cmake -G Ninja -S "$out/compiled/$target" -B "$out/build-$target" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$out/build-$target" -j 2
done

phase "4. against PyTorch ($steps steps each) and against each other"
io="$out/compiled/cpu/io.json"
node "$root/tools/ort-run/ort-run.js" gen-inputs --model "$model" --io "$io" \
  --seed 0 --outputs "$out/inputs"
ref=(/usr/bin/python3 "$root/tools/torch-ref/stpar-train-ref.py" verify
     --model "$model" --inputs "$out/inputs" --steps "$steps"
     --loss next-token --optimizer adamw --lr 1e-3 --rtol "$rtol")
status=0
for target in cuda cpu; do
  echo "--- $target program vs PyTorch"
  "${ref[@]}" --io "$out/compiled/$target/io.json" --work "$out/steps-$target" \
    -- "${mpirun[@]}" -np 1 "$out/build-$target/stpar_program" \
    | grep -E "loss|summary|FAIL" || status=1
done
echo "--- cuda program vs cpu program (step 1 outputs)"
/usr/bin/python3 - "$io" "$out/steps-cuda/step1/outputs" "$out/steps-cpu/step1/outputs" "$pair_rtol" <<'EOF' || status=1
import json, sys
import numpy as np
io = json.load(open(sys.argv[1]))
worst, ok = 0.0, True
for t in io["outputs"]:
    a = np.fromfile(f"{sys.argv[2]}/{t['file']}", dtype=np.float32)
    b = np.fromfile(f"{sys.argv[3]}/{t['file']}", dtype=np.float32)
    scale = float(np.max(np.abs(b))) or 1.0
    err = float(np.max(np.abs(a - b))) / scale
    worst = max(worst, err)
    if not err <= float(sys.argv[4]):
        ok = False
        print(f"  {t['name']}: error {err:.3e} FAIL")
print(f"  {len(io['outputs'])} outputs, worst error {worst:.3e} "
      f"(max|cuda-cpu| / max|cpu|): {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF

phase "5. per-op times on the GPU next to the plan"
run=("${mpirun[@]}" -np 1 "$out/build-cuda/stpar_program" --weights "$out"
     --inputs "$out/steps-cuda/step1/inputs" --outputs "$out/profile-outputs")
mkdir -p "$out/profile-outputs"
"${run[@]}" >/dev/null 2>&1  # warm-up
STPAR_PROFILE=1 "${run[@]}" 2>"$out/profile.txt" >/dev/null
/usr/bin/python3 "$root/tools/torch-ref/profile-vs-plan.py" \
  "$out/profile.txt" "$out/compiled/plan.json"
exit $status
