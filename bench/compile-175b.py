#!/usr/bin/python3
"""Benchmark: `stpar compile` of the zoo's GPT-3 175B graph for 1,024 devices
(issue 10).

usage: bench/compile-175b.py [--stpar build/bin/stpar] [--devices 1024]
                             [--cluster dgx-a100-80g-128] [--batch 1536]
                             [--seq 2048] [--keep DIR]

Generates GPT-3 175B with python/stpar-zoo (graph only: the weights are
external data that is never written, so compiling must not need them),
runs `stpar compile` to the end (plan, planned and partitioned MLIR, cuda/
and cpu/) and prints one table row per phase of output plus the totals:
wall time and peak resident memory of the compile process (wait4's rusage),
and the size of every output. Aim (issue 10): under 30 s and 2 GB on a
2-core machine.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(path) for f in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stpar", default=os.path.join(ROOT, "build", "bin",
                                                        "stpar"))
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--cluster", default="dgx-a100-80g-128")
    parser.add_argument("--batch", type=int, default=1536)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--keep", help="keep the model and output here")
    args = parser.parse_args()
    zoo = os.path.join(ROOT, "python", "stpar-zoo")
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        onnx_path = os.path.join(work, "gpt3-175b.onnx")
        subprocess.run([sys.executable, zoo, "generate", "gpt3-175b", "-o",
                        onnx_path], check=True, capture_output=True)
        out = os.path.join(work, "out")
        cmd = [args.stpar, "compile", onnx_path,
               f"--dim=batch_size={args.batch}", f"--dim=seq_len={args.seq}",
               "--cluster", args.cluster, "--devices", str(args.devices),
               "-o", out]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        stderr = proc.stderr.read().decode()
        if status != 0:
            print(f"stpar compile failed (status {status}):\n{stderr}",
                  file=sys.stderr)
            return 1
        rss = usage.ru_maxrss / 1024.0
        print(f"stpar compile gpt3-175b (graph only), {args.devices} devices "
              f"of {args.cluster}, batch_size={args.batch} "
              f"seq_len={args.seq}")
        print(f"{'output':<22} {'bytes':>14}")
        for name in ["plan.json", "plan.txt", "planned.mlir",
                     "partitioned.mlir", "cpu", "cuda"]:
            path = os.path.join(out, name)
            size = tree_bytes(path) if os.path.exists(path) else -1
            print(f"{name:<22} {size:>14}")
        print(f"{'time (s)':<22} {wall:>14.2f}   aim < 30: "
              f"{'yes' if wall < 30 else 'NO'}")
        print(f"{'peak RSS (MiB)':<22} {rss:>14.1f}   aim < 2048: "
              f"{'yes' if rss < 2048 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
