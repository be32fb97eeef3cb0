#!/usr/bin/env python3
# verify-matrix.py - runs `stpar verify` over models x plans x rank counts
# and prints one line per case (docs/verify.md, "The matrix").
#
#   verify-matrix.py --stpar BIN --work DIR [--models a,b] [--strategies s,t]
#                    [--ranks 1,2,4,8,2x2,2x4] [--cases m:s:r[:M],...] [--cxx-flags F]
#                    [--train [--steps N] [--recompute on|off]]
#
# Each case forces its plan through a plan file (`stpar plan --strategy S
# [--mesh AxB] -o plan.json`, then `stpar verify --plan plan.json`).
# Cases run one after another; the cases of one model share one --keep
# folder (DIR/<model>), so the emitted program's build folder is reused and
# only program.cpp recompiles. A line reads
#   MODEL STRATEGY RANKS: PASS|FAIL|ERROR max_rel_err=X (T s)
# (with --train: worst_err/tol=X, the largest error over its tolerance of
# any compared element, docs/training.md)
# with the first error line for ERROR. A case's optional fourth field M
# (--train) runs the step as M micro-batches (`stpar verify --micro-batches
# M`; the line then reads MODEL STRATEGY RANKS mb=M: ...). Exit 0 when every case ran and
# passed, else 1.
import argparse
import os
import re
import subprocess
import sys
import time

SHARED = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "..", "..", "..", "..", "shared", "models"))

# Model name -> (file under ../shared/models, stpar compile arguments).
# Batch 8 so that data parallelism splits it 8 ways.
MODELS = {
    "gpt2": ("torch113_gpt2_tiny_op17/model.onnx",
             ["--dim", "batch=8", "--dim", "seq=8"]),
    "llama": ("torch113_llama_block_op17/model.onnx",
              ["--dim", "batch=8", "--dim", "seq=8"]),
    "megatron": ("ort_gpt2_megatron.onnx",
                 ["--dim", "batch_size=8", "--dim", "seq_len=8",
                  "--dim", "past_seq_len=4", "--dim", "total_seq_len=12"]),
    "bert": ("ort_bert_toy_optimized.onnx",
             ["--dim", "batch=8", "--dim", "max_seq_len_in_batch=8",
              "--batch-dim", "batch"]),
}
STRATEGIES = ["dp", "megatron", "temporal", "search"]
# --train adds data parallelism with ZeRO stage 1, 2 and 3 (`stpar plan
# --strategy dp --zero N`).
TRAIN_STRATEGIES = ["dp", "zero1", "zero2", "zero3", "megatron", "temporal",
                    "search"]
# --train: the loss of each model (logits: next-token; the Llama block
# exports hidden states) and the optimizer of each plan kind (both kinds
# of update are covered on every model).
LOSSES = {"gpt2": "next-token", "llama": "mean-square",
          "megatron": "next-token", "bert": "next-token"}
OPTIMIZERS = {"dp": "sgd", "megatron": "adamw", "temporal": "sgd",
              "search": "adamw", "zero1": "adamw", "zero2": "sgd",
              "zero3": "adamw"}
RANKS = ["1", "2", "4", "8", "2x2", "2x4"]
# Cases stpar must reject, with the reason it must give: Megatron-LM splits
# attention by heads and key/value heads by query groups; ORT's GPT-2
# Megatron model has 2 heads and the Llama block 2 key/value heads, so
# tp = 4 is no Megatron configuration of either (4x2 is their dp x tp case
# in the subsets instead).
EXPECTED_REJECTIONS = {
    ("megatron", "megatron", "2x4"):
        "tp=4 does not divide the 2 attention heads",
    ("llama", "megatron", "2x4"):
        "tp=4 does not divide the extent 2 of the dim its split reaches",
}


def run_case(args, model, strategy, ranks, micro_batches=None):
    """The plan is forced through a plan file, as a user would: `stpar plan
    --strategy S [--mesh AxB] -o plan.json`, then `stpar verify --plan`."""
    path, dims = MODELS[model]
    model_path = os.path.join(args.shared, path)
    plan_file = os.path.join(args.work, f"{model}-{strategy}-{ranks}.json")
    os.makedirs(args.work, exist_ok=True)
    plan = [args.stpar, "plan", model_path, "--cluster", args.cluster,
            "-o", plan_file] + dims
    if strategy.startswith("zero"):
        plan += ["--strategy", "dp", "--zero", strategy[len("zero"):]]
    else:
        plan += ["--strategy", strategy]
    if "x" in ranks:
        plan += ["--mesh", ranks]
    else:
        plan += ["--devices", ranks]
    start = time.time()
    p = subprocess.run(plan, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    expected = EXPECTED_REJECTIONS.get((model, strategy, ranks))
    if expected:
        if p.returncode == 1 and expected in p.stderr:
            return "REJECTED", (f"{model} {strategy} {ranks}: REJECTED as "
                                f"expected -- {expected}")
        return "ERROR", (f"{model} {strategy} {ranks}: ERROR -- expected "
                         f"stpar plan to fail with '{expected}', got exit "
                         f"{p.returncode}: " + p.stderr.strip()[-200:])
    if p.returncode != 0:
        return "ERROR", (f"{model} {strategy} {ranks}: ERROR -- stpar plan: "
                         + p.stderr.strip()[-200:])
    cmd = [args.stpar, "verify", model_path, "--cluster", args.cluster,
           "--plan", plan_file, "--keep", os.path.join(args.work, model)]
    cmd += dims
    if args.cxx_flags:
        cmd += ["--cxx-flags=" + args.cxx_flags]
    if args.train:
        cmd += ["--train", "--steps", str(args.steps), "--loss",
                LOSSES[model], "--optimizer", OPTIMIZERS[strategy]]
    if micro_batches:
        cmd += ["--micro-batches", micro_batches]
    if args.recompute:
        cmd += ["--recompute", args.recompute]
    if args.precision:
        cmd += ["--precision", args.precision]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    seconds = time.time() - start
    rels = [float(m) for m in re.findall(
                r"worst error/tolerance (\S+)" if args.train
                else r"max_rel_err=(\S+)", p.stdout)
            if m not in ("NaN", "Infinity", "nan", "inf")]
    worst = max(rels) if rels else float("nan")
    if p.returncode == 0:
        status = "PASS"
    elif p.returncode == 1 and ("verify: MISMATCH" in p.stdout or
                                "summary:" in p.stdout):
        status = "FAIL"
    else:
        status = "ERROR"
    line = f"{model} {strategy} {ranks}"
    if micro_batches:
        line += f" mb={micro_batches}"
    line += f": {status}"
    if rels and args.train:
        line += f" worst_err/tol={worst:.3f}"
    elif rels:
        line += f" max_rel_err={worst:.3e}"
    line += f" ({seconds:.1f} s)"
    if status == "ERROR":
        errors = [l.strip() for l in p.stderr.splitlines()
                  if "error" in l and not l.startswith("stpar verify: error: stpar compile failed")]
        line += " -- " + (errors[0] if errors else p.stderr.strip()[-200:])
    if status == "FAIL":
        fails = [l for l in p.stdout.splitlines() if "FAIL" in l][:4]
        line += " -- " + "; ".join(fails)
    return status, line


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stpar", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--shared", default=SHARED)
    parser.add_argument("--cluster", default="dgx-a100-80g-1")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--strategies", default="",
                        help="default: " + ",".join(STRATEGIES) +
                        " (with --train: " + ",".join(TRAIN_STRATEGIES) + ")")
    parser.add_argument("--ranks", default=",".join(RANKS))
    parser.add_argument("--cases", default="",
                        help="explicit MODEL:STRATEGY:RANKS[:MICROBATCHES] list (overrides "
                             "--models/--strategies/--ranks)")
    parser.add_argument("--cxx-flags", default="-O0")
    parser.add_argument("--train", action="store_true",
                        help="verify the training step (stpar verify "
                             "--train) against PyTorch instead")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--recompute", default="",
                        help="on|off: force activation recomputation "
                             "(stpar verify --recompute; default: the plan's)")
    parser.add_argument("--precision", default="",
                        help="fp32|mixed: stpar verify --precision (default: "
                             "stpar's)")
    args = parser.parse_args()
    if not args.strategies:
        args.strategies = ",".join(TRAIN_STRATEGIES if args.train
                                   else STRATEGIES)
    if args.cases:
        cases = [tuple(c.split(":")) for c in args.cases.split(",")]
    else:
        cases = []
        for m in args.models.split(","):
            for r in args.ranks.split(","):
                for s in args.strategies.split(","):
                    cases.append((m, s, r))
    ok = True
    for case in cases:
        m, s, r = case[:3]
        if m not in MODELS:
            sys.exit(f"verify-matrix: unknown model '{m}' ({', '.join(MODELS)})")
        status, line = run_case(args, m, s, r, *case[3:4])
        print(line, flush=True)
        ok = ok and status in ("PASS", "REJECTED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
