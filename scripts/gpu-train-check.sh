#!/usr/bin/env bash
# gpu-train-check.sh - build and run the one-rank CUDA training step of the
# bundled example on one NVIDIA GPU, check it against PyTorch autograd and
# the CPU twin, and print per-op GPU times next to the plan's predictions
# (docs/training.md, "Per-op times and the GPU check").
#
#   scripts/gpu-train-check.sh [OPTIONS]               all stages, one machine
#   scripts/gpu-train-check.sh --prepare DIR [OPTIONS] build host (no GPU)
#   scripts/gpu-train-check.sh --run DIR               GPU host
#   scripts/gpu-train-check.sh --compare DIR           build host again
#
# Options: --steps N (2), --cluster C (dgx-a100-80g-1), --precision
# fp32|mixed (fp32). Stages:
#   prepare  build stpar (scripts/install-deps.sh), generate the example (the
#            GPT of scripts/run-example.sh), stpar compile --devices 1
#            --loss next-token --optimizer adamw --return-gradients
#            [--precision mixed] (cpu/ and cuda/ of the same partitioned
#            step), random inputs, then the CPU program for N steps against
#            PyTorch. DIR/bundle holds all a GPU host needs.
#   run      on the GPU host, from DIR/bundle: build the CUDA program (cmake,
#            nvcc for this GPU's architecture; without MPI when the host has
#            none: a one-rank program needs none; NCCL from NCCL_HOME, the
#            CUDA toolkit or the nvidia-nccl Python wheel), run it N steps
#            against PyTorch, then once more with STPAR_PROFILE=1 after a
#            warm-up: per-op times summed per ONNX node and phase next to
#            the plan's phase times (plan.json). DIR/cuda-step1.tar holds the
#            step-1 loss and gradients for the compare stage.
#   compare  the CUDA program's step-1 loss and gradients against the CPU
#            program's (mixed: both round GEMM operands to bf16 at the same
#            points, so 1e-2; fp32: 1e-4).
# Tolerances against PyTorch (float64 autograd): rtol 1e-4 (fp32), 2e-2
# (mixed: bf16 GEMM operands, fp32 accumulation). Python: $STPAR_PYTHON, else
# the first of /usr/bin/python3, python3 that has numpy, onnx and torch.
# Exit 0 only when every check of the stages run passes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=2
cluster=dgx-a100-80g-1
precision=fp32
mode=all
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --cluster) cluster="$2"; shift ;;
    --precision) precision="$2"; shift ;;
    --prepare|--run|--compare) mode="${1#--}"; dir="$2"; shift ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "gpu-train-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$mode" = all ]; then
  dir="$root/build/gpu-check"
elif [ -z "$dir" ]; then
  echo "gpu-train-check: --$mode needs a directory" >&2; exit 2
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bundle="$dir/bundle"

die() { echo "gpu-train-check: error: $*" >&2; exit 1; }
phase() { echo "=== $*"; }

pick_python() {
  local p
  for p in ${STPAR_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
       "$p" -c 'import numpy, onnx, torch' >/dev/null 2>&1; then
      echo "$p"; return 0
    fi
  done
  die "no Python with numpy, onnx and torch (set STPAR_PYTHON)"
}

# The settings travel with the bundle, so --run and --compare need none.
write_settings() {
  case "$precision" in
    fp32) rtol=1e-4; pair_rtol=1e-4 ;;
    mixed) rtol=2e-2; pair_rtol=1e-2 ;;
    *) die "--precision must be fp32 or mixed" ;;
  esac
  printf 'steps=%s\ncluster=%s\nprecision=%s\nrtol=%s\npair_rtol=%s\n' \
    "$steps" "$cluster" "$precision" "$rtol" "$pair_rtol" >"$bundle/settings"
}
read_settings() {
  [ -f "$bundle/settings" ] || die "$bundle/settings not found (run --prepare first)"
  # shellcheck disable=SC1091
  . "$bundle/settings"
}

train=(--loss next-token --optimizer adamw --lr 1e-3)

# ref TARGET_WORK PROGRAM...: N steps of the program against PyTorch.
ref() {
  local work="$1"; shift
  "$py" "$root/tools/torch-ref/stpar-train-ref.py" verify \
    --model "$bundle/gpt-small.onnx" --inputs "$bundle/inputs" \
    --steps "$steps" "${train[@]}" --rtol "$rtol" \
    --io "$bundle/compiled/$target/io.json" --work "$work" -- "$@"
}

prepare() {
  export CCACHE_BASEDIR="$root"
  local build_dir="$root/build"
  phase "prepare 1. build stpar, generate the example"
  "$root/scripts/install-deps.sh"
  cmake -G Ninja -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build_dir" -j 2 --target stpar stpar-opt
  rm -rf "$bundle" "$dir/build-cpu" "$dir/steps-cpu"
  mkdir -p "$bundle"
  write_settings
  "$py" "$root/python/stpar-zoo" generate custom --arch gpt \
    --layers 4 --hidden 256 --heads 8 --ffn 1024 --vocab 1000 --seq 128 \
    --weights random -o "$bundle/gpt-small.onnx"

  phase "prepare 2. stpar compile (one device, training step, $precision)"
  "$build_dir/bin/stpar" compile "$bundle/gpt-small.onnx" \
    --dim batch_size=8 --dim seq_len=128 --cluster "$cluster" --devices 1 \
    "${train[@]}" --return-gradients --precision "$precision" \
    -o "$bundle/compiled" >"$bundle/plan.txt"
  node "$root/tools/ort-run/ort-run.js" gen-inputs \
    --model "$bundle/gpt-small.onnx" --io "$bundle/compiled/cpu/io.json" \
    --seed 0 --outputs "$bundle/inputs" 2>"$dir/gen-inputs.log"
  # Adam's moments are not read from here: the reference writes zeros for
  # step 1 and the program's own moments for later steps.
  "$py" - "$bundle/compiled/cpu/io.json" "$bundle/inputs" <<'EOF'
import json, os, sys
for t in json.load(open(sys.argv[1]))["inputs"]:
    if t["name"].startswith(("adam_m:", "adam_v:")):
        os.remove(os.path.join(sys.argv[2], t["file"]))
EOF

  phase "prepare 3. the CPU program, $steps steps against PyTorch"
  cmake -G Ninja -S "$bundle/compiled/cpu" -B "$dir/build-cpu" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir/build-cpu" -j 2
  local mpirun=(mpirun --oversubscribe)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
  target=cpu
  ref "$dir/steps-cpu" "${mpirun[@]}" -np 1 "$dir/build-cpu/stpar_program" \
    | grep -E "loss|summary|FAIL" || status=1
}

run_gpu() {
  read_settings
  export PATH="/usr/local/cuda/bin:$PATH"
  command -v nvcc >/dev/null 2>&1 || die "nvcc not found (CUDA 13 under /usr/local/cuda)"
  nvidia-smi -L >/dev/null 2>&1 || die "no NVIDIA GPU visible (nvidia-smi -L)"
  phase "run 1. build the CUDA program"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  local arch
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
  # NCCL: NCCL_HOME, the toolkit, or the nvidia-nccl wheel of this Python.
  if [ -z "${NCCL_HOME:-}" ] && ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
    local wheel
    wheel="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)"
    [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ] && export NCCL_HOME="$wheel"
    if [ -z "${NCCL_HOME:-}" ]; then
      local header
      header="$(find /usr/local /opt /usr/lib -name nccl.h -path '*include*' 2>/dev/null | head -1)"
      [ -n "$header" ] && export NCCL_HOME="$(dirname "$(dirname "$header")")"
    fi
    echo "NCCL: ${NCCL_HOME:-from the CUDA toolkit}"
  fi
  [ -n "${NCCL_HOME:-}" ] && export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
  local with_mpi=ON launch=()
  if command -v mpirun >/dev/null 2>&1 && command -v mpicxx >/dev/null 2>&1; then
    launch=(mpirun -np 1)
    [ "$(id -u)" -eq 0 ] && launch+=(--allow-run-as-root)
  else
    with_mpi=OFF
    echo "no MPI on this host: a one-rank program built with STPAR_WITH_MPI=OFF"
  fi
  rm -rf "$dir/build-cuda" "$dir/steps-cuda" "$dir/profile-outputs"
  cmake -G Ninja -S "$bundle/compiled/cuda" -B "$dir/build-cuda" \
    -DCMAKE_BUILD_TYPE=Release -DSTPAR_WITH_MPI="$with_mpi" \
    -DSTPAR_CUDA_ARCHITECTURES="$arch" >/dev/null
  cmake --build "$dir/build-cuda" -j "$(nproc)"
  local program=("${launch[@]}" "$dir/build-cuda/stpar_program")

  phase "run 2. the CUDA program, $steps steps against PyTorch ($precision)"
  target=cuda
  ref "$dir/steps-cuda" "${program[@]}" | grep -E "loss|summary|FAIL" || status=1
  # The step-1 loss and gradients, for --compare on the build host.
  "$py" - "$bundle/compiled/cuda/io.json" "$dir/steps-cuda/step1/outputs" \
    "$dir/cuda-step1.tar" <<'EOF'
import json, sys, tarfile, os
io = json.load(open(sys.argv[1]))
with tarfile.open(sys.argv[3], "w") as tar:
    for t in io["outputs"]:
        if t["name"] == "loss" or t["name"].startswith("grad:"):
            tar.add(os.path.join(sys.argv[2], t["file"]), arcname=t["file"])
EOF

  phase "run 3. per-op times on the GPU next to the plan ($cluster)"
  mkdir -p "$dir/profile-outputs"
  local run=("${program[@]}" --weights "$bundle" --inputs "$dir/steps-cuda/step1/inputs"
             --outputs "$dir/profile-outputs")
  "${run[@]}" >/dev/null 2>&1 || die "the warm-up run failed"
  # Eager module loading: kernels load at start, not inside the first op
  # that launches them (CUDA's default is lazy).
  CUDA_MODULE_LOADING=EAGER STPAR_PROFILE=1 "${run[@]}" 2>"$dir/profile.txt" >/dev/null ||
    die "the profile run failed"
  "$py" "$root/tools/torch-ref/profile-vs-plan.py" "$dir/profile.txt" \
    "$bundle/compiled/plan.json"
}

compare() {
  read_settings
  phase "compare: the CUDA program's step-1 loss and gradients vs the CPU program's"
  [ -d "$dir/steps-cpu/step1/outputs" ] || die "$dir/steps-cpu not found (run --prepare here)"
  local cuda_out="$dir/steps-cuda/step1/outputs"
  if [ -f "$dir/cuda-step1.tar" ]; then
    mkdir -p "$dir/cuda-step1"
    tar -xf "$dir/cuda-step1.tar" -C "$dir/cuda-step1"
    cuda_out="$dir/cuda-step1"
  fi
  "$py" - "$bundle/compiled/cpu/io.json" "$cuda_out" "$dir/steps-cpu/step1/outputs" "$pair_rtol" <<'EOF' || status=1
import json, os, sys
import numpy as np
io = json.load(open(sys.argv[1]))
worst, ok, n = 0.0, True, 0
for t in io["outputs"]:
    if not (t["name"] == "loss" or t["name"].startswith("grad:")):
        continue
    path = os.path.join(sys.argv[2], t["file"])
    if not os.path.exists(path):
        print(f"  {t['name']}: no CUDA output {path} FAIL")
        ok = False
        continue
    a = np.fromfile(path, dtype=np.float32)
    b = np.fromfile(os.path.join(sys.argv[3], t["file"]), dtype=np.float32)
    scale = float(np.max(np.abs(b))) or 1.0
    err = float(np.max(np.abs(a - b))) / scale
    worst, n = max(worst, err), n + 1
    if not err <= float(sys.argv[4]):
        ok = False
        print(f"  {t['name']}: error {err:.3e} FAIL")
print(f"  loss and {n - 1} gradients, worst error {worst:.3e} "
      f"(max|cuda-cpu| / max|cpu|, tolerance {sys.argv[4]}): "
      f"{'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
}

status=0
py="$(pick_python)"
case "$mode" in
  prepare) prepare ;;
  run) run_gpu ;;
  compare) compare ;;
  all) prepare; run_gpu; compare ;;
esac
if [ "$status" -eq 0 ]; then echo "gpu-train-check: PASS"; else echo "gpu-train-check: FAIL"; fi
exit $status
