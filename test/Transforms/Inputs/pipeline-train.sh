#!/bin/bash
# Plans MODEL with one Megatron-LM configuration, builds its training step
# twice -- the whole step (the reference) and the pipelined SPMD program
# (-stp-pipeline-schedule, -stp-partition, -stp-pipeline-stages) -- and
# runs both with Inputs/spmd-sim.py on the same random inputs.
# usage: pipeline-train.sh BIN PYTHON SIM OUTDIR NAME MODEL DEVICES STRATEGY DIMS...
set -euo pipefail
bin=$1 python=$2 sim=$3 out=$4 name=$5 model=$6 devices=$7 strategy=$8
shift 8
p="$out/$name"
"$bin/stpar" plan "$model" "$@" --cluster dgx-a100-80g-1 --devices "$devices" \
  --strategy "$strategy" --emit-mlir "$p.planned.mlir" > /dev/null 2>&1
step='-stp-training-step=loss=next-token return-gradients=true'
"$bin/stpar-opt" "$p.planned.mlir" "$step" --mlir-print-op-generic > "$p.global.mlir"
"$bin/stpar-opt" "$p.planned.mlir" "$step" -stp-pipeline-schedule \
  -stp-partition -stp-pipeline-stages > "$p.pipelined.mlir"
"$bin/stpar-opt" "$p.pipelined.mlir" --mlir-print-op-generic > "$p.pipelined.g.mlir"
echo "$name: $(grep -o 'stp.pipeline = {[^}]*}' "$p.pipelined.mlir" | head -1)"
"$python" "$sim" "$p.global.mlir" "$p.pipelined.g.mlir" 100 | sed "s/^/$name: /"
