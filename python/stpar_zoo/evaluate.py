"""A small numpy interpreter for the ops the zoo emits (ONNX 1.12 ships no
reference evaluator), used to run tiny generated models with random weights
and check what the graph computes: output shape, finiteness, causality (a
later token never changes an earlier position's logits), and for the MoE
that exactly top-k experts get a non-zero gate per token.

Only for tiny models: every tensor is materialized in float32.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .builder import BUFFER_TAG

_NP = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64,
       TensorProto.BOOL: np.bool_, TensorProto.INT32: np.int32}
_erf = np.vectorize(math.erf, otypes=[np.float32])


def _slice(x, starts, ends, axes, steps):
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(int(s), int(min(e, 2**62)), int(st))
    return x[tuple(sl)]


def _scatter_elements(data, idx, upd, axis):
    out = data.copy()
    np.put_along_axis(out, idx, upd, axis=axis)
    return out


def _layer_norm(x, w, b, axis, eps):
    m = x.mean(axis, keepdims=True)
    v = ((x - m) ** 2).mean(axis, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def _topk(x, k, axis, largest, sorted_):
    k = int(k[0])
    idx = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _trilu(x, k, upper):
    k = int(k) if k is not None else 0
    return np.triu(x, k) if upper else np.tril(x, k)


def _expand(x, shape):
    return x * np.ones(tuple(int(s) for s in shape), dtype=x.dtype)


def _reshape(x, shape):
    shape = [x.shape[i] if s == 0 else int(s) for i, s in enumerate(shape)]
    return x.reshape(shape)


def _unsqueeze(x, axes):
    for a in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _split(x, split, axis):
    return np.split(x, np.cumsum(split)[:-1], axis=axis)


def _reduce(fn):
    def run(x, axes=None, keepdims=1):
        return fn(x, axis=tuple(int(a) for a in axes), keepdims=bool(keepdims))
    return run


def _op(node, ins, a):
    t = node.op_type
    x = ins[0] if ins else None
    if t == "Constant":
        return numpy_helper.to_array(a["value"])
    if t == "Identity":
        return x
    if t in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Or",
             "Max"):
        y = ins[1]
        if t == "Div" and x.dtype.kind == "i":
            return x // y
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
                "Div": np.divide, "Pow": np.power, "Equal": np.equal,
                "Less": np.less, "Or": np.logical_or,
                "Max": np.maximum}[t](x, y).astype(
                    np.bool_ if t in ("Equal", "Less", "Or")
                    else np.result_type(x, y))
    unary = {"Neg": np.negative, "Not": np.logical_not, "Sqrt": np.sqrt,
             "Tanh": np.tanh, "Erf": _erf,
             "Relu": lambda v: np.maximum(v, 0),
             "Sigmoid": lambda v: 1 / (1 + np.exp(-v))}
    if t in unary:
        return unary[t](x).astype(x.dtype)
    if t == "Cast":
        return x.astype(_NP[a["to"]])
    if t == "Shape":
        return np.array(x.shape, dtype=np.int64)
    if t == "Gather":
        return np.take(x, ins[1], axis=a.get("axis", 0))
    if t == "Unsqueeze":
        return _unsqueeze(x, ins[1])
    if t == "Concat":
        return np.concatenate(ins, axis=a["axis"])
    if t == "Reshape":
        return _reshape(x, ins[1])
    if t == "Transpose":
        return np.transpose(x, a.get("perm"))
    if t == "MatMul":
        return np.matmul(x, ins[1])
    if t == "Einsum":
        return np.einsum(a["equation"].decode(), *ins)
    if t == "Split":
        return _split(x, ins[1], a.get("axis", 0))
    if t == "Slice":
        axes = ins[3] if len(ins) > 3 else range(len(ins[1]))
        steps = ins[4] if len(ins) > 4 else [1] * len(ins[1])
        return _slice(x, ins[1], ins[2], axes, steps)
    if t == "Where":
        return np.where(x, ins[1], ins[2])
    if t == "Softmax":
        return _softmax(x, a.get("axis", -1))
    if t == "LayerNormalization":
        return _layer_norm(x, ins[1], ins[2], a.get("axis", -1),
                           a.get("epsilon", 1e-5)).astype(np.float32)
    if t == "ReduceMean":
        return _reduce(np.mean)(x, a["axes"], a.get("keepdims", 1))
    if t == "ReduceSum":
        return _reduce(np.sum)(x, ins[1], a.get("keepdims", 1))
    if t == "Range":
        return np.arange(x, ins[1], ins[2], dtype=x.dtype)
    if t == "CumSum":
        return np.cumsum(x, axis=int(ins[1])).astype(x.dtype)
    if t == "ConstantOfShape":
        v = numpy_helper.to_array(a["value"])
        return np.full(tuple(int(s) for s in x), v[0], dtype=v.dtype)
    if t == "Expand":
        return _expand(x, ins[1])
    if t == "Trilu":
        return _trilu(x, ins[1] if len(ins) > 1 else None, a.get("upper", 1))
    if t == "TopK":
        return _topk(x, ins[1], a.get("axis", -1), a.get("largest", 1),
                     a.get("sorted", 1))
    if t == "ScatterElements":
        return _scatter_elements(x, ins[1], ins[2], a.get("axis", 0))
    raise NotImplementedError(f"op {t} ({node.name})")


def run(model: onnx.ModelProto, feeds: dict, weights: dict,
        keep=()) -> dict:
    """Evaluates the graph; returns the graph outputs and the values named
    in `keep`."""
    env = dict(weights)
    env.update(feeds)
    for node in model.graph.node:
        attrs = {x.name: helper.get_attribute_value(x)
                 for x in node.attribute}
        res = _op(node, [env[i] for i in node.input], attrs)
        if not isinstance(res, (list, tuple)):
            res = [res]
        for name, value in zip(node.output, res):
            env[name] = np.asarray(value)
    names = [o.name for o in model.graph.output] + list(keep)
    return {n: env[n] for n in names}


def random_weights(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Random stand-ins for the absent weights; buffers get their real
    values (causal mask = lower triangle of ones; rotary cos/sin tables)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in model.graph.initializer:
        shape = tuple(t.dims)
        buffer = t.doc_string.startswith(BUFFER_TAG)
        if buffer and t.name.endswith(".attn.bias"):  # GPT causal mask
            out[t.name] = np.tril(np.ones(shape, dtype=np.float32))
        elif buffer and "rotary_emb" in t.name:
            s, d = shape
            inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
            f = np.outer(np.arange(s), inv)
            emb = np.concatenate([f, f], axis=-1)
            out[t.name] = (np.cos(emb) if "cos" in t.name
                           else np.sin(emb)).astype(np.float32)
        else:
            scale = 1.0 if len(shape) == 1 else 0.5 / math.sqrt(shape[-2])
            out[t.name] = (rng.standard_normal(shape) * scale).astype(
                np.float32)
    return out


def selftest(path: str, batch: int = 2, seq: int | None = None) -> list[str]:
    """Runs a tiny model on random weights; returns report lines (a line
    starting with FAIL marks a failed property)."""
    model = onnx.load(path, load_external_data=False)
    import json
    meta = {p.key: p.value for p in model.metadata_props}
    cfg = json.loads(meta["stpar_zoo.config"])
    seq = seq or cfg["seq"]
    vocab = cfg["vocab"]
    weights = random_weights(model)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    names = [i.name for i in model.graph.input]

    def feeds(x):
        f = {"input_ids": x}
        if "attention_mask" in names:
            f["attention_mask"] = np.ones_like(x)
        return f

    gates = [n.output[0] for n in model.graph.node
             if n.op_type == "ScatterElements"]
    r = run(model, feeds(ids), weights, keep=gates)
    logits = r["logits"]
    lines = []
    ok = logits.shape == (batch, seq, vocab)
    lines.append(f"{'ok' if ok else 'FAIL'}: logits shape "
                 f"{list(logits.shape)}")
    ok = bool(np.isfinite(logits).all())
    lines.append(f"{'ok' if ok else 'FAIL'}: logits finite")
    # Causality: change the last token only.
    ids2 = ids.copy()
    ids2[:, -1] = (ids2[:, -1] + 1) % vocab
    l2 = run(model, feeds(ids2), weights)["logits"]
    early = float(np.abs(l2[:, :-1] - logits[:, :-1]).max())
    last = float(np.abs(l2[:, -1] - logits[:, -1]).max())
    ok = early < 1e-4 and last > 1e-4
    lines.append(f"{'ok' if ok else 'FAIL'}: causal (earlier positions "
                 f"{'unchanged' if early < 1e-4 else 'CHANGED'}, last "
                 f"{'changed' if last > 1e-4 else 'UNCHANGED'})")
    if "attention_mask" in names:
        # Left padding: a masked first token must not influence the rest.
        mask = np.ones_like(ids)
        mask[:, 0] = 0
        ids3 = ids.copy()
        ids3[:, 0] = (ids3[:, 0] + 1) % vocab
        a = run(model, {"input_ids": ids, "attention_mask": mask},
                weights)["logits"]
        b = run(model, {"input_ids": ids3, "attention_mask": mask},
                weights)["logits"]
        diff = float(np.abs(a[:, 1:] - b[:, 1:]).max())
        ok = diff < 1e-4
        lines.append(f"{'ok' if ok else 'FAIL'}: padding (masked token "
                     f"{'ignored' if ok else 'NOT ignored'})")
    for g in gates:
        nz = (r[g] != 0).sum(axis=-1)
        sums = r[g].sum(axis=-1)
        ok = bool((nz == cfg["top_k"]).all() and np.allclose(sums, 1, 1e-5))
        lines.append(f"{'ok' if ok else 'FAIL'}: moe gates: {cfg['top_k']} "
                     f"non-zero of {cfg['experts']} per token, sum 1")
    return lines
