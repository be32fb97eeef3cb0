"""Seeded random weights for zoo models (``generate --weights random``).

The zoo's graphs keep their initializers external and absent (see
builder.py). For small models the emitted per-rank programs of ``stpar
compile`` need real data: this module writes the external data file at the
offsets the initializers record. Parameters are drawn from N(0, 0.02^2)
(GPT-2's initializer range), norm scales are 1 plus that noise; buffers get
their real values (causal mask: lower-triangular ones; rotary tables: the
cos/sin of Llama's rotary embedding, base 10000).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .builder import BUFFER_TAG

LIMIT = 1 << 30  # bytes

_DTYPES = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64,
           TensorProto.FLOAT16: np.float16}


def _external(t: TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def _values(t: TensorProto, rng: np.random.Generator) -> np.ndarray:
    dims = [int(d) for d in t.dims]
    dtype = _DTYPES.get(t.data_type)
    if dtype is None:
        raise ValueError(f"initializer '{t.name}': data type {t.data_type} "
                         "is not supported by --weights random")
    name = t.name
    if t.doc_string.startswith(BUFFER_TAG):
        if name.endswith(("cos_cached", "sin_cached")) and len(dims) == 2:
            seq, d = dims
            inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
            freqs = np.outer(np.arange(seq), inv)
            emb = np.concatenate([freqs, freqs], axis=-1)[:, :d]
            f = np.cos if name.endswith("cos_cached") else np.sin
            return f(emb).astype(dtype)
        if len(dims) >= 2 and dims[-1] == dims[-2]:
            n = dims[-1]
            return np.broadcast_to(np.tril(np.ones((n, n))), dims).astype(dtype)
        raise ValueError(f"buffer '{name}' has no known values")
    if dtype == np.int64:
        raise ValueError(f"integer parameter '{name}' has no known values")
    v = rng.normal(0.0, 0.02, size=dims)
    if ("norm" in name or "ln" in name.split(".")[-2:][0]) and \
            name.endswith("weight") and len(dims) == 1:
        v += 1.0
    return v.astype(dtype)


def write_random(model: onnx.ModelProto, path: str, seed: int) -> int:
    """Writes the external data file of `model` at `path`; returns its size.
    Raises ValueError above LIMIT bytes or for an unknown buffer."""
    end = 0
    for t in model.graph.initializer:
        ext = _external(t)
        end = max(end, int(ext["offset"]) + int(ext["length"]))
    if end > LIMIT:
        raise ValueError(f"the weights need {end} bytes; --weights random "
                         f"writes at most {LIMIT} (use a smaller model)")
    rng = np.random.default_rng(seed)
    data = bytearray(end)
    for t in model.graph.initializer:
        ext = _external(t)
        off, length = int(ext["offset"]), int(ext["length"])
        raw = np.ascontiguousarray(_values(t, rng)).tobytes()
        assert len(raw) == length, (t.name, len(raw), length)
        data[off:off + length] = raw
    with open(path, "wb") as f:
        f.write(data)
    return end
