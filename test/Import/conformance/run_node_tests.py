#!/usr/bin/python3
"""Runs ONNX node tests through stpar: import, then verify on 1 and 2 ranks.

usage: run_node_tests.py [--verify] [--only NAMES] [--ranks 1,2] [--jobs N]
                         STPAR DIR [DIR ...]

Every folder holding model.onnx under the given directories is attempted
(none is skipped): the model is imported with `STPAR import`; a clean
rejection (exit code 1 and an `error:` line) counts as rejected with the
diagnostic as its reason, anything else (another exit code, a crash, no
diagnostic) is a failure. With --verify, each imported test is compiled for
the CPU and run on 1 and 2 MPI ranks (`STPAR verify --inputs D --expected
D`) and compared with the test's own output_<i>.pb; a mismatch or a phase
that fails is a failure. --only restricts the folders to a comma-separated
list of names (the default target's representative subset); --ranks the
rank counts to verify on (default 1,2).

Node tests pass shape-like operands (Reshape's shape, Slice's starts, TopK's
K, Range's bounds, ...) as graph inputs whose values are in
test_data_set_0. stpar imports static programs, so integer and scalar graph
inputs with a value there are baked into initializers first (what an
exporter with constant folding produces); the remaining inputs are
renumbered for --inputs.

An imported test whose input data contradicts the shapes its model declares
(a few old node tests) is not verified, and counted with that reason.

Prints one line per failure, the rejection reasons with their counts, then
`attempted A: imported I, verified V on 1 and 2 ranks, rejected R, not
verified U (...), failed F`. Exits 1 if anything failed.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

import onnx

INTEGER_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
# ONNX's backend tests compare with numpy's allclose at rtol 1e-3, atol 1e-7.
RTOL, ATOL = "1e-3", "1e-6"


def prepare(model, folder, tmp, mismatches=None):
    """Bakes integer and scalar inputs with a test value into initializers.

    Writes tmp/model.onnx and tmp/data/input_<i>.pb (the remaining inputs,
    renumbered) and tmp/data/output_<i>.pb. Returns the model path; appends
    to `mismatches` each input whose test data contradicts the shape the
    model declares (a few old node tests: the program would be compiled for
    the declared shape).
    """
    if mismatches is None:
        mismatches = []
    src = os.path.join(folder, "test_data_set_0")
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    kept = 0
    for index, value_info in enumerate(inputs):
        path = os.path.join(src, f"input_{index}.pb")
        tt = value_info.type.tensor_type
        scalar = tt.HasField("shape") and len(tt.shape.dim) == 0
        if (tt.elem_type in INTEGER_TYPES or scalar) and os.path.exists(path):
            tensor = onnx.TensorProto()
            with open(path, "rb") as f:
                tensor.ParseFromString(f.read())
            tensor.name = value_info.name
            model.graph.initializer.append(tensor)
            model.graph.input.remove(value_info)
            continue
        if os.path.exists(path):
            tensor = onnx.TensorProto()
            with open(path, "rb") as f:
                tensor.ParseFromString(f.read())
            declared = [d.dim_value if d.HasField("dim_value") else None
                        for d in tt.shape.dim]
            if tt.HasField("shape") and list(tensor.dims) != declared:
                mismatches.append(f"input '{value_info.name}' data has shape "
                                  f"{list(tensor.dims)}, the model declares "
                                  f"{declared}")
            shutil.copy(path, os.path.join(data, f"input_{kept}.pb"))
        kept += 1
    if os.path.isdir(src):
        for name in os.listdir(src):
            if name.startswith("output_"):
                shutil.copy(os.path.join(src, name), os.path.join(data, name))
    path = os.path.join(tmp, "model.onnx")
    onnx.save(model, path)
    return path


def first_error(stderr):
    """The innermost diagnostic: verify quotes the failing phase's own
    error lines after its summary line, so the last `error:` line."""
    errors = [line for line in stderr.splitlines() if "error:" in line]
    if errors:
        return errors[-1].split("error:", 1)[1].strip()
    return (stderr.strip().splitlines() or ["(no message)"])[-1]


def reason_key(message):
    """A rejection reason with names taken out, to count alike ones."""
    message = re.sub(r"'[^']*'", "'…'", message)
    message = re.sub(r"^unnamed node with output '…' ", "", message)
    message = re.sub(r"^node '…' ", "", message)
    return message[:100]


def check(stpar, folder, verify, ranks_list=("1", "2")):
    """Returns (kind, detail): kind in rejected/imported/verified/failed."""
    name = os.path.basename(folder)
    try:
        model = onnx.load(os.path.join(folder, "model.onnx"),
                          load_external_data=False)
    except Exception as e:  # the ONNX library cannot read it either
        model = None
    mismatches = []
    with tempfile.TemporaryDirectory() as tmp:
        path = (prepare(model, folder, tmp, mismatches) if model is not None
                else os.path.join(folder, "model.onnx"))
        result = subprocess.run([stpar, "import", path, "-o", os.devnull],
                                capture_output=True, text=True)
        if result.returncode == 1 and "error:" in result.stderr:
            return "rejected", reason_key(first_error(result.stderr))
        if result.returncode != 0:
            return "failed", (f"FAILED {name}: import exit "
                              f"{result.returncode}: "
                              f"{first_error(result.stderr)}")
        if not verify:
            return "imported", None
        if mismatches:
            return "unverifiable", reason_key(mismatches[0])
        data = os.path.join(tmp, "data")
        for ranks in ranks_list:
            result = subprocess.run(
                [stpar, "verify", path, "--inputs", data, "--expected", data,
                 "--cluster", "dgx-a100-80g-1", "--devices", ranks,
                 "--cxx-flags=-O0", "--rtol", RTOL, "--atol", ATOL,
                 "--timeout", "300"],
                capture_output=True, text=True)
            if result.returncode != 0:
                # The innermost error, then the end of verify's stderr (a
                # failed phase quotes its command's own stderr there).
                last = "".join(f"    {line}\n" for line in
                               result.stderr.rstrip().splitlines()[-20:])
                return "failed", (f"FAILED {name}: verify on {ranks} "
                                  f"rank(s), exit {result.returncode}: "
                                  f"{first_error(result.stderr)}\n{last}")
        return "verified", None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--every", type=int, default=1,
                        help="attempt every N-th test folder only (a sample "
                             "that keeps the sorted order)")
    parser.add_argument("stpar")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    ranks = tuple(filter(None, args.ranks.split(",")))
    folders = []
    for root in args.dirs:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not os.path.isdir(path) or (only and name not in only):
                continue
            if os.path.isfile(os.path.join(path, "model.onnx")):
                folders.append(path)
            else:
                print(f"not a test: {name} (no model.onnx)")
    missing = only - {os.path.basename(f) for f in folders}
    folders = folders[::max(1, args.every)]
    for name in sorted(missing):
        print(f"FAILED {name}: not found")
    counts = collections.Counter()
    reasons = collections.Counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for kind, detail in pool.map(
                lambda f: check(args.stpar, f, args.verify, ranks), folders):
            counts[kind] += 1
            if kind in ("rejected", "unverifiable"):
                reasons[(kind, detail)] += 1
            elif detail:
                print(detail, flush=True)
    for (kind, reason), n in sorted(reasons.items(),
                                    key=lambda kv: (-kv[1], kv[0])):
        label = "rejected" if kind == "rejected" else "not verified"
        print(f"{label} {n:4d}: {reason}")
    imported = (counts["imported"] + counts["verified"] +
                counts["unverifiable"])
    print(f"attempted {len(folders)}: imported {imported}, verified "
          f"{counts['verified']} on {' and '.join(ranks)} ranks, rejected "
          f"{counts['rejected']}, not verified {counts['unverifiable']} "
          f"(test data contradicts the model), failed "
          f"{counts['failed'] + len(missing)}")
    return 0 if counts["failed"] == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
