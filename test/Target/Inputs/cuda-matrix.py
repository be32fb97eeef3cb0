#!/usr/bin/env python3
"""Compiles the cuda programs of partitioned plans with nvcc: every model of
the verify matrix (test/Verify/Inputs/verify-matrix.py) with every plan kind
(dp 2x2, megatron 2x4, temporal 2x2, search on 8 devices). Prints one line
per case, "MODEL STRATEGY RANKS: OK (T s)" or "... FAILED: <why>"; exits 1
when a case fails.

usage: cuda-matrix.py --stpar STPAR --shared MODELS_DIR --work DIR
                      --nvcc "NVCC COMMAND PREFIX" [--cases m:s:r[:M],...] [--train]

With --train the training step is compiled (stpar compile --loss, the loss
and optimizer of verify-matrix.py's LOSSES and OPTIMIZERS); a case's
fourth field M compiles it with M micro-batches (folder and line
MODEL-STRATEGY-RANKS-mbM, "MODEL STRATEGY RANKS mb=M: ...").
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "Verify", "Inputs"))
from importlib import import_module  # noqa: E402

_matrix = import_module("verify-matrix")
MODELS = _matrix.MODELS
CASES = [(m, s, r if (m, s, r) not in _matrix.EXPECTED_REJECTIONS else "4x2")
         for m in MODELS
         for s, r in (("dp", "2x2"), ("megatron", "2x4"),
                      ("temporal", "2x2"), ("search", "8"))]


def run_case(args, model, strategy, ranks, micro_batches=None):
    path, dims = MODELS[model]
    out = os.path.join(args.work, f"{model}-{strategy}-{ranks}" +
                       (f"-mb{micro_batches}" if micro_batches else "") +
                       (f"-{args.precision}" if args.precision else ""))
    cmd = [args.stpar, "compile", os.path.join(args.shared, path), *dims,
           "--cluster", "dgx-a100-80g-1", "--emit=cuda", "-o", out]
    if strategy.startswith("zero"):
        cmd += ["--strategy", "dp", "--zero", strategy[len("zero"):]]
    else:
        cmd += ["--strategy", strategy]
    if args.train:
        cmd += ["--loss", _matrix.LOSSES[model], "--optimizer",
                _matrix.OPTIMIZERS[strategy]]
        if micro_batches:
            cmd += ["--micro-batches", micro_batches]
    if args.precision:
        cmd += ["--precision", args.precision]
    if "x" in ranks:
        cmd += ["--mesh", ranks]
    else:
        cmd += ["--devices", ranks]
    start = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED: stpar compile: {r.stderr.strip().splitlines()[-1:]}"
    cuda = os.path.join(out, "cuda")
    nvcc = shlex.split(args.nvcc) + ["-I", cuda,
                                     os.path.join(cuda, "program.cu"),
                                     "-o", os.path.join(cuda, "stpar_program")]
    r = subprocess.run(nvcc, capture_output=True, text=True)
    if r.returncode != 0:
        return f"FAILED: nvcc: {r.stderr.strip()[-500:]}"
    return f"OK ({time.time() - start:.1f} s)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stpar", required=True)
    p.add_argument("--shared", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--nvcc", required=True)
    p.add_argument("--train", action="store_true",
                   help="compile the training step (stpar compile --loss)")
    p.add_argument("--cases")
    p.add_argument("--precision", default="",
                   help="fp32|mixed: stpar compile --precision")
    args = p.parse_args()
    cases = ([tuple(c.split(":")) for c in args.cases.split(",")]
             if args.cases else CASES)
    os.makedirs(args.work, exist_ok=True)
    ok = True
    for case in cases:
        m, s, r = case[:3]
        status = run_case(args, m, s, r, *case[3:4])
        ok &= status.startswith("OK")
        label = f"{m} {s} {r}" + (f" mb={case[3]}" if len(case) > 3 else "")
        print(f"{label}: {status}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
