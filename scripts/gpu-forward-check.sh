#!/usr/bin/env bash
# gpu-forward-check.sh - the one-rank CUDA forward programs of the shared
# models and of zoo Mixtrals (mixture of experts) on one NVIDIA GPU, each
# against ONNX Runtime (docs/emitted-code.md, "Running the CUDA program").
#
#   scripts/gpu-forward-check.sh --prepare DIR [--shared DIR]   build host
#   scripts/gpu-forward-check.sh --run DIR                      GPU host
#
#   prepare  for each case: stpar verify --devices 1 --keep (the CPU program
#            against ONNX Runtime, which also writes the random inputs and
#            the reference outputs), then stpar compile --plan of the same
#            plan for the cuda/ program. DIR/bundle holds all a GPU host
#            needs (programs, inputs, reference outputs); needs a built stpar
#            (build/bin) and scripts/install-deps.sh's Node.js and ONNX
#            Runtime.
#   run      on the GPU host: builds every CUDA program (nvcc for this GPU;
#            without MPI where the host has none: one rank needs none; NCCL
#            as in gpu-train-check.sh), runs each once and compares its
#            outputs (per-op times in DIR/run-NAME.log) with the reference
#            by the rule of `stpar verify`:
#            element error |a - b| / max(|b|, atol / rtol) <= rtol, rtol 1e-4,
#            atol 1e-5 (mixed precision: 2e-2, 1e-2); integer outputs exact.
# Exit 0 only when every case passes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="$root/../shared"
mode=""
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare|--run) mode="${1#--}"; dir="$2"; shift ;;
    --shared) shared="$2"; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-forward-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$mode" ] || { echo "gpu-forward-check: give --prepare DIR or --run DIR" >&2; exit 2; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bundle="$dir/bundle"
die() { echo "gpu-forward-check: error: $*" >&2; exit 1; }

# name|model|stpar options (fp32 unless --precision mixed: bf16 GEMM
# operands, checked as stpar verify does, rtol 2e-2, atol 1e-2)
cases() {
  local m="$shared/models"
  cat <<EOF
gpt2|$m/torch113_gpt2_tiny_op17/model.onnx|--dim batch=8 --dim seq=8
gpt2-mixed|$m/torch113_gpt2_tiny_op17/model.onnx|--dim batch=8 --dim seq=8 --precision mixed
llama|$m/torch113_llama_block_op17/model.onnx|--dim batch=8 --dim seq=8
megatron|$m/ort_gpt2_megatron.onnx|--dim batch_size=8 --dim seq_len=8 --dim past_seq_len=4 --dim total_seq_len=12
bert|$m/ort_bert_toy_optimized.onnx|--dim batch=8 --dim max_seq_len_in_batch=8 --batch-dim batch
moe|$m/torch113_moe_top2_op17/model.onnx|--dim batch=8 --dim seq=8
moe-mixed|$m/torch113_moe_top2_op17/model.onnx|--dim batch=8 --dim seq=8 --precision mixed
mixtral|$dir/models/mixtral.onnx|--dim batch_size=8 --dim seq_len=8
mixtral-wide|$dir/models/mixtral-wide.onnx|--dim batch_size=8 --dim seq_len=128
mixtral-mixed|$dir/models/mixtral.onnx|--dim batch_size=8 --dim seq_len=8 --precision mixed
EOF
}

prepare() {
  local stpar="$root/build/bin/stpar"
  [ -x "$stpar" ] || die "$stpar not found (build stpar first)"
  rm -rf "$bundle" "$dir/work" "$dir/models"
  mkdir -p "$bundle" "$dir/work" "$dir/models"
  local zoo=(/usr/bin/python3 "$root/python/stpar-zoo" generate custom --arch mixtral
             --heads 4 --kv-heads 2 --vocab 100 --experts 4 --top-k 2 --weights random)
  "${zoo[@]}" --layers 2 --hidden 32 --ffn 64 --seq 8 -o "$dir/models/mixtral.onnx" >/dev/null
  "${zoo[@]}" --layers 1 --hidden 256 --ffn 512 --seq 128 -o "$dir/models/mixtral-wide.onnx" >/dev/null
  local name model opts status=0
  while IFS='|' read -r name model opts; do
    case "$opts" in *--precision*) ;; *) opts="$opts --precision fp32" ;; esac
    # shellcheck disable=SC2086
    if ! "$stpar" verify "$model" $opts --cluster hgx-h200-1 --devices 1 \
         --keep "$dir/work/$name" --cxx-flags=-O1 </dev/null >"$dir/work/$name.log" 2>&1; then
      echo "$name: the CPU program does not match ONNX Runtime (see $dir/work/$name.log)"
      status=1
      continue
    fi
    # shellcheck disable=SC2086
    "$stpar" compile "$model" $opts --cluster hgx-h200-1 --devices 1 \
      --plan "$dir/work/$name/compile/plan.json" -o "$dir/work/$name/cuda-compile" \
      </dev/null >>"$dir/work/$name.log" 2>&1 || die "$name: stpar compile failed ($dir/work/$name.log)"
    mkdir -p "$bundle/$name"
    cp -r "$dir/work/$name/cuda-compile/cuda" "$bundle/$name/cuda"
    cp -r "$dir/work/$name/inputs" "$dir/work/$name/reference" "$bundle/$name/"
    # The weights: the model's file and its external data, same names.
    mkdir -p "$bundle/$name/model"
    cp "$model" "$bundle/$name/model/"
    local data
    for data in $(/usr/bin/python3 -c 'import json,sys; print(" ".join(sorted({p["file"] for p in json.load(open(sys.argv[1])).get("parameters", []) if p.get("file")})))' "$bundle/$name/cuda/io.json"); do
      [ -f "$bundle/$name/model/$data" ] || cp "$(dirname "$model")/$data" "$bundle/$name/model/"
    done
    echo "$name: prepared (CPU program matches ONNX Runtime)"
  done < <(cases)
  return $status
}

run_gpu() {
  export PATH="/usr/local/cuda/bin:$PATH"
  command -v nvcc >/dev/null 2>&1 || die "nvcc not found"
  nvidia-smi -L >/dev/null 2>&1 || die "no NVIDIA GPU visible"
  local py=python3 arch with_mpi=ON launch=()
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
  if [ -z "${NCCL_HOME:-}" ] && ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
    local header
    header="$(find /usr/local /opt /usr/lib -name nccl.h -path '*include*' 2>/dev/null | head -1)"
    [ -n "$header" ] && export NCCL_HOME="$(dirname "$(dirname "$header")")"
  fi
  [ -n "${NCCL_HOME:-}" ] && export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
  if ! { command -v mpirun && command -v mpicxx; } >/dev/null 2>&1; then
    with_mpi=OFF
  else
    launch=(mpirun -np 1)
    [ "$(id -u)" -eq 0 ] && launch+=(--allow-run-as-root)
  fi
  local name pids=()
  for name in $(ls "$bundle"); do
    [ -d "$bundle/$name/cuda" ] || continue
    (cmake -G Ninja -S "$bundle/$name/cuda" -B "$dir/build/$name" \
       -DCMAKE_BUILD_TYPE=Release -DSTPAR_WITH_MPI="$with_mpi" \
       -DSTPAR_CUDA_ARCHITECTURES="$arch" >/dev/null &&
     cmake --build "$dir/build/$name" >"$dir/build-$name.log" 2>&1) &
    pids+=($!)
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  for name in $(ls "$bundle"); do
    [ -d "$bundle/$name/cuda" ] || continue
    if [ ! -x "$dir/build/$name/stpar_program" ]; then
      echo "$name: build FAILED"; tail -20 "$dir/build-$name.log"; status=1; continue
    fi
    rm -rf "$dir/out/$name"; mkdir -p "$dir/out/$name"
    # Profiled (STPAR_PROFILE: per-op times in run-NAME.log).
    if ! STPAR_PROFILE=1 "${launch[@]}" "$dir/build/$name/stpar_program" --weights "$bundle/$name/model" \
         --inputs "$bundle/$name/inputs" --outputs "$dir/out/$name" \
         >"$dir/run-$name.log" 2>&1; then
      echo "$name: the program FAILED"; tail -20 "$dir/run-$name.log"; status=1; continue
    fi
    "$py" - "$bundle/$name/cuda/io.json" "$dir/out/$name" "$bundle/$name/reference" "$name" <<'EOF' || status=1
import json, os, sys
import numpy as np
io = json.load(open(sys.argv[1]))
rtol, atol = (2e-2, 1e-2) if io.get("precision") == "mixed" else (1e-4, 1e-5)
DT = {"float32": np.float32, "float64": np.float64, "int64": np.int64,
      "int32": np.int32, "bool": np.uint8, "float16": np.float16}
ok, worst = True, 0.0
for t in io["outputs"]:
    dt = DT.get(t["dtype"])
    a = np.fromfile(os.path.join(sys.argv[2], t["file"]), dtype=dt)
    b = np.fromfile(os.path.join(sys.argv[3], t["file"]), dtype=dt)
    if a.shape != b.shape:
        print(f"  {t['name']}: {a.size} elements, reference {b.size} FAIL"); ok = False; continue
    if np.issubdtype(dt, np.integer):
        err = float(np.count_nonzero(a != b))
        good = err == 0
    else:
        a, b = a.astype(np.float64), b.astype(np.float64)
        err = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), atol / rtol), initial=0.0))
        good = err <= rtol and np.all(np.isfinite(a))
    worst = max(worst, err)
    ok &= bool(good)
    if not good:
        print(f"  {t['name']}: max_rel_err {err:.3e} FAIL")
print(f"{sys.argv[4]}: {len(io['outputs'])} outputs, max_rel_err {worst:.3e} (rtol {rtol:g}): "
      f"{'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
  done
  return $status
}

status=0
case "$mode" in
  prepare) prepare || status=1 ;;
  run) run_gpu || status=1 ;;
esac
if [ "$status" -eq 0 ]; then echo "gpu-forward-check: PASS"; else echo "gpu-forward-check: FAIL"; fi
exit $status
