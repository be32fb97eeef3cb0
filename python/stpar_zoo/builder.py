"""Graph builder that names nodes and values the way torch.onnx.export does.

torch 1.13 names a node after its module scope and op type
(``/blocks.0/qkv/MatMul``) and its output ``<node name>_output_0``; every
Python-level constant becomes its own ``Constant`` node; every ``x.size(i)``
becomes ``Shape`` -> ``Gather``.  The builder reproduces those conventions so
the generated graphs look like (and exercise the importer like) real exports.

Weights are initializers whose data is *external and absent*: each tensor gets
``data_location = EXTERNAL`` with ``location``/``offset``/``length`` filled in as
if the data file existed (offsets 4096-aligned, one tensor after another), but
the data file is never written.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Initializers whose doc_string starts with this are buffers (causal masks,
# rotary tables), not trainable parameters.
BUFFER_TAG = "buffer"
ALIGN = 4096
FLOAT_MIN = float(np.finfo(np.float32).min)
INT64_MAX = 9223372036854775807

_ITEMSIZE = {TensorProto.FLOAT: 4, TensorProto.FLOAT16: 2,
             TensorProto.BFLOAT16: 2, TensorProto.INT64: 8,
             TensorProto.BOOL: 1}


class Builder:
    """Accumulates nodes and external initializers of one graph."""

    def __init__(self, data_location: str):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.data_location = data_location
        self.offset = 0
        self.scope_stack: list[str] = []
        self.counters: dict[tuple[str, str], int] = {}
        self.anon = 0
        self.num_params = 0

    # -- scopes and names -------------------------------------------------
    def scope(self, name: str):
        builder = self

        class _Scope:
            def __enter__(self):
                builder.scope_stack.append(name)

            def __exit__(self, *exc):
                builder.scope_stack.pop()

        return _Scope()

    def _node_name(self, op: str) -> str:
        prefix = "/" + "/".join(self.scope_stack) if self.scope_stack else ""
        key = (prefix, op)
        n = self.counters.get(key, 0)
        self.counters[key] = n + 1
        return f"{prefix}/{op}" + (f"_{n}" if n else "")

    # -- nodes ------------------------------------------------------------
    def op(self, op_type: str, inputs, num_outputs: int = 1, outputs=None,
           **attrs):
        name = self._node_name(op_type)
        if outputs is None:
            outputs = [f"{name}_output_{i}" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs,
                                           name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def const(self, value, dtype=np.int64, scalar: bool = False):
        """A Constant node, as the exporter emits for Python numbers/lists."""
        arr = np.array(value, dtype=dtype)
        if not scalar and arr.ndim == 0:
            arr = arr.reshape(1)
        return self.op("Constant", [], value=numpy_helper.from_array(arr))

    def fconst(self, value: float):
        return self.const(value, np.float32, scalar=True)

    def dim(self, x: str, axis: int):
        """``x.size(axis)``: Shape -> Gather(scalar) -> 0-d int64."""
        shape = self.op("Shape", [x])
        return self.op("Gather", [shape, self.const(axis, scalar=True)],
                       axis=0)

    def unsqueeze0(self, scalar: str):
        # The exporter names these constants onnx::Unsqueeze_N (no scope).
        self.anon += 1
        axes = self.op("Constant", [], outputs=[f"onnx::Unsqueeze_{self.anon}"],
                       value=numpy_helper.from_array(
                           np.array([0], dtype=np.int64)))
        return self.op("Unsqueeze", [scalar, axes])

    def shape_of(self, parts):
        """Concat of 1-element pieces: ints become Constants, names (0-d
        dims from :meth:`dim`) become Unsqueeze; as in ``x.view(b, s, h, d)``."""
        pieces = [self.unsqueeze0(p) if isinstance(p, str) else self.const([p])
                  for p in parts]
        return self.op("Concat", pieces, axis=0)

    def reshape(self, x: str, parts):
        return self.op("Reshape", [x, self.shape_of(parts)], allowzero=0)

    # -- initializers -----------------------------------------------------
    def weight(self, name: str, dims, dtype=TensorProto.FLOAT,
               buffer: bool = False) -> str:
        """An initializer whose data lives (absent) in the external file."""
        t = TensorProto()
        t.name = name
        t.data_type = dtype
        t.dims.extend(int(d) for d in dims)
        t.data_location = TensorProto.EXTERNAL
        numel = math.prod(int(d) for d in dims)
        length = numel * _ITEMSIZE[dtype]
        for key, value in (("location", self.data_location),
                           ("offset", str(self.offset)),
                           ("length", str(length))):
            entry = t.external_data.add()
            entry.key = key
            entry.value = value
        self.offset += (length + ALIGN - 1) // ALIGN * ALIGN
        if buffer:
            t.doc_string = BUFFER_TAG
        else:
            self.num_params += numel
        self.initializers.append(t)
        return name

    # -- common composites --------------------------------------------------
    def linear(self, x: str, prefix: str, n_in: int, n_out: int,
               bias: bool = True, scope: str | None = None) -> str:
        """nn.Linear as exported with constant folding: MatMul with the
        pre-transposed weight [in, out], then Add(bias, y)."""
        w = self.weight(f"{prefix}.weight", [n_in, n_out])
        with self.scope(scope or prefix.split(".")[-1]):
            y = self.op("MatMul", [x, w])
            if bias:
                b = self.weight(f"{prefix}.bias", [n_out])
                y = self.op("Add", [b, y])
        return y

    def layer_norm(self, x: str, prefix: str, hidden: int, eps: float,
                   scope: str) -> str:
        w = self.weight(f"{prefix}.weight", [hidden])
        b = self.weight(f"{prefix}.bias", [hidden])
        with self.scope(scope):
            return self.op("LayerNormalization", [x, w, b], axis=-1,
                           epsilon=eps)
