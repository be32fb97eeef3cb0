#!/usr/bin/python3
"""Benchmark: ONNX import of the zoo's largest graphs (issue 3).

usage: bench/import-zoo.py [--stpar build/bin/stpar] [--seq 2048] [--batch 1]

Generates GPT-3 175B, Llama-2-70B and Mixtral-8x7B with python/stpar-zoo
(graph only; weights are external data that is never written), imports each
with `stpar import --dim batch_size=B --dim seq_len=S`, and prints one table
row per model: graph size, wall time and peak resident memory of the import
(from wait4's rusage of that one process). Weights are never read: the data
files do not exist. Target (issue 3): under 10 s each on a 2-core machine.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["gpt3-175b", "llama-2-70b", "mixtral-8x7b"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stpar", default=os.path.join(ROOT, "build", "bin",
                                                        "stpar"))
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    zoo = os.path.join(ROOT, "python", "stpar-zoo")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            onnx_path = os.path.join(tmp, name + ".onnx")
            subprocess.run([sys.executable, zoo, "generate", name, "-o",
                            onnx_path], check=True, capture_output=True)
            mlir_path = os.path.join(tmp, name + ".mlir")
            start = time.perf_counter()
            proc = subprocess.Popen(
                [args.stpar, "import", onnx_path,
                 f"--dim=batch_size={args.batch}", f"--dim=seq_len={args.seq}",
                 "-o", mlir_path], stderr=subprocess.PIPE)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            stderr = proc.stderr.read().decode()
            if status != 0:
                print(f"{name}: import failed:\n{stderr}", file=sys.stderr)
                return 1
            rows.append((name, os.path.getsize(onnx_path),
                         os.path.getsize(mlir_path), wall,
                         usage.ru_maxrss / 1024.0))
    print(f"ONNX import, batch_size={args.batch} seq_len={args.seq}, "
          f"weights absent (never read)")
    print(f"{'model':<14} {'onnx bytes':>11} {'mlir bytes':>11} "
          f"{'time (s)':>9} {'peak RSS (MiB)':>15} {'< 10 s':>7}")
    for name, onnx_bytes, mlir_bytes, wall, rss in rows:
        print(f"{name:<14} {onnx_bytes:>11} {mlir_bytes:>11} {wall:>9.2f} "
              f"{rss:>15.1f} {'yes' if wall < 10 else 'NO':>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
