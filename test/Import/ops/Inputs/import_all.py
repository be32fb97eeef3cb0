#!/usr/bin/python3
"""Imports every model of a folder (names from stdin) and prints each IR.

usage: make_op_models.py DIR | import_all.py STPAR DIR

Prints `// ---- NAME` before each model's IR (or its diagnostics), for
FileCheck's CHECK-LABEL. Exits 1 if any import fails.
"""
import subprocess
import sys

stpar, folder = sys.argv[1], sys.argv[2]
failed = 0
for name in sys.stdin.read().split():
    result = subprocess.run([stpar, "import", f"{folder}/{name}.onnx"],
                            capture_output=True, text=True)
    print(f"// ---- {name}")
    print(result.stdout + result.stderr)
    failed |= result.returncode != 0
sys.exit(1 if failed else 0)
