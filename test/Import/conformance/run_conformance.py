#!/usr/bin/python3
"""Imports every ONNX node test whose ops are all in the importer's list.

usage: run_conformance.py STPAR DIR [DIR ...]

For each test folder (one holding model.onnx) under the given directories,
the model's ops (including those of nested graphs) are compared with the op
list of issue 3 plus the ops the importer handles beyond it; folders using
any other op are skipped. The rest are
imported with `STPAR import`; a folder fails when the import exits non-zero
(or crashes). Prints one line per failure, then
`imported N of M attempted (K skipped)`, and exits 1 if any failed.

Node tests pass shape-like operands (Reshape's shape, Slice's starts, TopK's
K, Unsqueeze's axes, Range's bounds, ...) as graph inputs whose values are
in test_data_set_0. stpar imports static programs, so integer and scalar
graph inputs with a value there are baked into initializers first (what an
exporter with constant folding produces); other float inputs stay inputs.
"""

import concurrent.futures
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import numpy_helper

ISSUE_LIST = {
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal",
    "Neg", "Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Gelu", "Softmax",
    "LayerNormalization", "RMSNormalization", "RotaryEmbedding", "ReduceMean",
    "ReduceSum", "ReduceMax", "Transpose", "Reshape", "Flatten", "Squeeze",
    "Unsqueeze", "Split", "Slice", "Concat", "Gather", "Where", "Equal",
    "Cast", "Expand", "Trilu", "Einsum", "TopK", "ScatterElements",
    "Constant", "Identity",
}
# Ops the importer handles beyond issue 3's list (exported by OPT/BLOOM,
# masks and shape computations); their node tests are attempted too.
SUPPORTED = ISSUE_LIST | {"CumSum", "And", "Or", "Xor", "Not", "Less", "Greater", "Min",
              "Max", "Shape", "Size", "ConstantOfShape", "Range"}


def ops_of(graph):
    ops = set()
    for node in graph.node:
        ops.add((node.domain or "", node.op_type))
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= ops_of(attr.g)
            for g in attr.graphs:
                ops |= ops_of(g)
    return ops


INTEGER_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}


def bake_integer_inputs(model, folder):
    """Turns integer graph inputs with a test value into initializers.

    Returns the number of inputs baked.
    """
    data_dir = os.path.join(folder, "test_data_set_0")
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    baked = 0
    for index, value_info in enumerate(inputs):
        path = os.path.join(data_dir, f"input_{index}.pb")
        scalar = (value_info.type.tensor_type.HasField("shape")
                  and len(value_info.type.tensor_type.shape.dim) == 0)
        if ((value_info.type.tensor_type.elem_type not in INTEGER_TYPES
             and not scalar) or not os.path.exists(path)):
            continue
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        tensor.name = value_info.name
        model.graph.initializer.append(tensor)
        model.graph.input.remove(value_info)
        baked += 1
    return baked


NON_NUMERIC = {onnx.TensorProto.STRING}


def non_numeric_reason(model):
    """Why the importer rejects this model by design, or None.

    stpar imports numeric tensors only: string tensors and sequence/optional
    values are reported as unsupported (a diagnostic, exit code 1).
    """
    for v in list(model.graph.input) + list(model.graph.output):
        if not v.type.HasField("tensor_type"):
            return f"'{v.name}' is not a tensor"
        if v.type.tensor_type.elem_type in NON_NUMERIC:
            return f"'{v.name}' is a string tensor"
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.i in NON_NUMERIC:
                return f"casts to string"
    return None


def run_import(stpar, model_path):
    return subprocess.run([stpar, "import", model_path, "-o", os.devnull],
                          capture_output=True, text=True)


def check_folder(stpar, folder):
    """Returns (kind, message) with kind in skipped/rejected/imported/failed."""
    model_path = os.path.join(folder, "model.onnx")
    model = onnx.load(model_path, load_external_data=False)
    ops = ops_of(model.graph)
    if not ops or any(d not in ("", "ai.onnx") or op not in SUPPORTED
                      for d, op in ops):
        return "skipped", None
    name = os.path.basename(folder)
    reason = non_numeric_reason(model)
    if reason:
        # Must be rejected cleanly: exit code 1 and a diagnostic.
        result = run_import(stpar, model_path)
        if result.returncode == 1 and "error:" in result.stderr:
            return "rejected", None
        return "failed", (f"FAILED {name}: expected a clean rejection "
                          f"({reason}), got exit {result.returncode}")
    with tempfile.TemporaryDirectory() as tmp:
        if bake_integer_inputs(model, folder):
            model_path = os.path.join(tmp, "model.onnx")
            onnx.save(model, model_path)
        result = run_import(stpar, model_path)
    if result.returncode == 0:
        strict = all(op in ISSUE_LIST for _, op in ops)
        return "imported-strict" if strict else "imported", None
    first = (result.stderr.strip().splitlines() or ["(no message)"])[0]
    return "failed", f"FAILED {name} (exit {result.returncode}): {first}"


def main():
    stpar = sys.argv[1]
    folders = []
    for root in sys.argv[2:]:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(os.path.join(path, "model.onnx")):
                folders.append(path)
    counts = {"skipped": 0, "rejected": 0, "imported": 0, "imported-strict": 0,
              "failed": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for kind, message in pool.map(lambda f: check_folder(stpar, f),
                                      folders):
            counts[kind] += 1
            if message:
                print(message)
    imported = counts["imported"] + counts["imported-strict"]
    attempted = imported + counts["failed"]
    print(f"imported {imported} of {attempted} attempted "
          f"({counts['imported-strict']} using only issue 3's op list); "
          f"{counts['rejected']} rejected as designed (string/sequence/"
          f"optional values); {counts['skipped']} skipped (ops outside the "
          f"list)")
    return 0 if counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
