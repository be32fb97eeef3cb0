"""Validation and summary of graph-only models.

ONNX 1.12's checker (check_model on a ModelProto too) insists that the file
named by an external tensor's ``location`` exists.  Our weights are absent by
design, so :func:`check_model` runs the checker (full_check=True, i.e. with
strict shape inference) on a copy of the model in which every initializer is
turned into a graph input of the same type and shape; the external-data fields
themselves are validated here (location, offset and length present, length =
elements x item size, no two tensors overlapping in the data file).
"""

from __future__ import annotations

import collections
import json
import math
import os

import onnx
from onnx import TensorProto, helper

from .builder import BUFFER_TAG

_ITEMSIZE = {TensorProto.FLOAT: 4, TensorProto.FLOAT16: 2,
             TensorProto.BFLOAT16: 2, TensorProto.INT64: 8,
             TensorProto.INT32: 4, TensorProto.BOOL: 1, TensorProto.DOUBLE: 8}


def numel(t: TensorProto) -> int:
    return math.prod(t.dims)


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def external_fields(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def check_external_data(model: onnx.ModelProto) -> None:
    """Raises ValueError unless every initializer is external and
    consistently placed in one data file."""
    spans = []
    for t in model.graph.initializer:
        if not is_external(t):
            raise ValueError(f"initializer '{t.name}' is not external")
        f = external_fields(t)
        for key in ("location", "offset", "length"):
            if key not in f:
                raise ValueError(f"initializer '{t.name}' has no '{key}'")
        loc = f["location"]
        if os.path.isabs(loc) or ".." in loc.split("/"):
            raise ValueError(f"initializer '{t.name}': bad location '{loc}'")
        offset, length = int(f["offset"]), int(f["length"])
        want = numel(t) * _ITEMSIZE[t.data_type]
        if length != want:
            raise ValueError(f"initializer '{t.name}': length {length}, "
                             f"expected {want}")
        spans.append((loc, offset, length, t.name))
    spans.sort()
    for (l1, o1, n1, a), (l2, o2, _, b) in zip(spans, spans[1:]):
        if l1 == l2 and o1 + n1 > o2:
            raise ValueError(f"'{a}' and '{b}' overlap in {l1}")


def check_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """Checker + strict shape inference; returns the shape-inferred model."""
    check_external_data(model)
    lifted = onnx.ModelProto()
    lifted.CopyFrom(model)
    inits = list(lifted.graph.initializer)
    del lifted.graph.initializer[:]
    lifted.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in inits)
    onnx.checker.check_model(lifted, full_check=True)
    # Shape inference reads only dims of initializers, never their data.
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _type_str(vi: onnx.ValueInfoProto) -> str:
    tt = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else
            str(d.dim_value) if d.HasField("dim_value") else "?"
            for d in tt.shape.dim]
    dtype = TensorProto.DataType.Name(tt.elem_type).lower()
    return f"{dtype} [{', '.join(dims)}]"


def summary(path: str) -> str:
    """Text summary of an ONNX file (weights never read)."""
    model = onnx.load(path, load_external_data=False)
    g = model.graph
    lines = [f"model: {os.path.basename(path)} "
             f"({os.path.getsize(path)} bytes)",
             f"ir_version: {model.ir_version}",
             "opset: " + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}"
                                   for o in model.opset_import),
             f"producer: {model.producer_name} {model.producer_version}"]
    meta = {p.key: p.value for p in model.metadata_props}
    if "stpar_zoo.config" in meta:
        cfg = json.loads(meta["stpar_zoo.config"])
        lines.append("config: " + " ".join(f"{k}={v}" for k, v in cfg.items()))
    for vi in g.input:
        lines.append(f"input: {vi.name} {_type_str(vi)}")
    for vi in g.output:
        lines.append(f"output: {vi.name} {_type_str(vi)}")
    counts = collections.Counter(n.op_type for n in g.node)
    lines.append(f"nodes: {len(g.node)}")
    for op in sorted(counts):
        lines.append(f"op {op}: {counts[op]}")
    inits = list(g.initializer)
    ext = [t for t in inits if is_external(t)]
    buffers = [t for t in inits if t.doc_string.startswith(BUFFER_TAG)]
    params = sum(numel(t) for t in inits
                 if not t.doc_string.startswith(BUFFER_TAG))
    lines.append(f"initializers: {len(inits)} (external {len(ext)}, "
                 f"buffers {len(buffers)})")
    lines.append("all initializers external: "
                 + ("yes" if len(ext) == len(inits) else "no"))
    lines.append(f"parameters: {params} ({params / 1e9:.3f}e9)")
    if "stpar_zoo.published_parameters" in meta:
        pub = float(meta["stpar_zoo.published_parameters"])
        lines.append(f"published parameters: {pub / 1e9:.3f}e9 "
                     f"(off by {100 * (params - pub) / pub:+.2f}%)")
    locs = sorted({external_fields(t).get("location", "") for t in ext})
    end = max((int(external_fields(t)["offset"])
               + int(external_fields(t)["length"]) for t in ext), default=0)
    for loc in locs:
        present = os.path.exists(os.path.join(os.path.dirname(path), loc))
        lines.append(f"external data: {loc} ({end} bytes, "
                     f"{'present' if present else 'absent'})")
    try:
        inferred = check_model(model)
        lines.append("checker: ok")
        out = {vi.name: vi for vi in inferred.graph.output}
        lines.append("inferred: " + ", ".join(
            f"{n} {_type_str(vi)}" for n, vi in out.items()))
    except Exception as e:  # report, do not crash: inspect is a diagnostic
        lines.append(f"checker: FAILED: {str(e).splitlines()[0]}")
    return "\n".join(lines)
