#!/usr/bin/python3
"""Small models of the ONNX Runtime contrib ops (and the default-domain
SimplifiedLayerNormalization ORT registers) that stpar imports, for
contrib-ops.test: each is verified against ONNX Runtime, which runs them.

usage: make-contrib-models.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

RNG = np.random.default_rng(0)


def const(name, shape, fn=None):
    values = RNG.normal(size=shape).astype(np.float32)
    return numpy_helper.from_array(fn(values) if fn else values, name)


def save(out, name, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, os.path.join(out, name + ".onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4, 16])
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", 4, 16])
    ms = "com.microsoft"
    # Rotary embedding: position ids as an input [B, S]; one offset [1]
    # with interleaved pairs; the head count inferred from the caches.
    cos = const("cos", [8, 4], np.cos)
    sin = const("sin", [8, 4], np.sin)
    ids = helper.make_tensor_value_info("position_ids", T.INT64, ["batch", 4])
    save(out, "rotary_ids",
         [helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos",
                                               "sin"], ["y"], domain=ms,
                           num_heads=2)], [x, ids], [y], [cos, sin])
    offset = numpy_helper.from_array(np.array([3], np.int64), "position_ids")
    save(out, "rotary_offset",
         [helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos",
                                               "sin"], ["y"], domain=ms,
                           num_heads=2, interleaved=1)], [x], [y],
         [cos, sin, offset])
    save(out, "rotary_heads",
         [helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos",
                                               "sin"], ["y"], domain=ms)],
         [x], [y], [cos, sin, offset])
    gamma = const("gamma", [16], lambda v: 1 + 0.1 * v)
    save(out, "simplified_layernorm",
         [helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"],
                           ["y"], epsilon=1e-6, axis=-1)], [x], [y], [gamma])
    skip = helper.make_tensor_value_info("skip", T.FLOAT, ["batch", 4, 16])
    bias = const("bias", [16])
    s = helper.make_tensor_value_info("s", T.FLOAT, ["batch", 4, 16])
    save(out, "skip_simplified_layernorm",
         [helper.make_node("SkipSimplifiedLayerNormalization",
                           ["x", "skip", "gamma", "bias"],
                           ["y", "", "", "s"], domain=ms, epsilon=1e-6)],
         [x, skip], [y, s], [gamma, bias])
    # Contrib Attention with 1-D mask_index: key lengths [batch] (right
    # padding) and end then start positions [2 * batch].
    weights = const("weights", [16, 48], lambda v: 0.2 * v)
    qkv_bias = const("qkv_bias", [48], lambda v: 0.1 * v)
    for name, lengths in [("attention_lengths", [3, 2]),
                          ("attention_ranges", [4, 3, 1, 0])]:
        mask = numpy_helper.from_array(np.array(lengths, np.int32),
                                       "mask_index")
        save(out, name,
             [helper.make_node("Attention", ["x", "weights", "qkv_bias",
                                             "mask_index"], ["y"], domain=ms,
                               num_heads=2)],
             [x], [y], [weights, qkv_bias, mask])
    save(out, "bias_gelu",
         [helper.make_node("BiasGelu", ["x", "bias"], ["y"], domain=ms)],
         [x], [y], [bias])
    multi_head_attention(out, x, y)
    group_query_attention(out, x, y)


def projections(widths, source="x"):
    """MatMul nodes source -> p0, p1, ... of the given widths, and their
    weights."""
    nodes, inits = [], []
    for i, w in enumerate(widths):
        inits.append(const(f"w{i}", [16, w], lambda v: 0.3 * v))
        nodes.append(helper.make_node("MatMul", [source, f"w{i}"], [f"p{i}"]))
    return nodes, inits


def reference_attention(q, k, v, scale, bias=None, causal=False):
    """The documented semantics in numpy: q [B, Hq, S, D], k and v
    [B, Hkv, T, D] (query head h reads key/value head h // (Hq / Hkv)),
    softmax(q k^T * scale + bias), causal: key j <= i + T - S. Returns
    [B, S, Hq * D]."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if bias is not None:
        s = s + bias
    seq, total = s.shape[-2:]
    if causal:
        later = np.arange(total)[None, :] > np.arange(seq)[:, None] + total - seq
        s = np.where(later, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    return o.transpose(0, 2, 1, 3).reshape(o.shape[0], seq, -1)


def split_heads(t, n):
    """[B, S, N*D] -> [B, N, S, D]."""
    b, s, w = t.shape
    return t.reshape(b, s, n, w // n).transpose(0, 2, 1, 3)


def save_data(out, name, arrays):
    """test_data_set-style input_<i>.pb / output_<i>.pb for verify's
    --inputs / --expected: arrays = [(kind, index, onnx name, value)]."""
    folder = os.path.join(out, name + "_data")
    os.makedirs(folder, exist_ok=True)
    for kind, index, tensor_name, value in arrays:
        tensor = numpy_helper.from_array(value.astype(np.float32),
                                         tensor_name)
        with open(os.path.join(folder, f"{kind}_{index}.pb"), "wb") as f:
            f.write(tensor.SerializeToString())


def ints(name, values, dtype=np.int32):
    return numpy_helper.from_array(np.array(values, dtype), name)


def multi_head_attention(out, x, y):
    """com.microsoft MultiHeadAttention (2 heads of 8): separate Q/K/V with
    the projection bias, key lengths and causal masking; packed QKV with an
    attention_bias; a past cache with present outputs; K/V in head layout
    with a raw [batch, total] key padding mask."""
    ms = "com.microsoft"
    nodes, inits = projections([16, 16, 16])
    bias = const("mha_bias", [48], lambda v: 0.1 * v)
    save(out, "mha_separate",
         nodes + [helper.make_node(
             "MultiHeadAttention", ["p0", "p1", "p2", "mha_bias",
                                    "lengths"], ["y"], domain=ms,
             num_heads=2, unidirectional=1)],
         [x], [y], inits + [bias, ints("lengths", [4, 2])])
    # An attention_bias [1, N, S, T] and a custom scale. (ONNX Runtime's
    # CPU kernel has no packed QKV or KV forms; their IR is checked by
    # test/Import/ops/contrib-attention.test.)
    nodes, inits = projections([16, 16, 16])
    attn_bias = const("attn_bias", [1, 2, 4, 4], lambda v: 0.5 * v)
    save(out, "mha_attention_bias",
         nodes + [helper.make_node("MultiHeadAttention",
                                   ["p0", "p1", "p2", "", "", "attn_bias"],
                                   ["y"], domain=ms, num_heads=2,
                                   scale=0.3)],
         [x], [y], inits + [attn_bias])
    nodes, inits = projections([16, 16, 16])
    past_k = const("past_key", [2, 2, 3, 8])
    past_v = const("past_value", [2, 2, 3, 8])
    pk = helper.make_tensor_value_info("present_key", T.FLOAT,
                                       ["batch", 2, 7, 8])
    save(out, "mha_past",
         nodes + [helper.make_node(
             "MultiHeadAttention", ["p0", "p1", "p2", "", "", "",
                                    "past_key", "past_value"],
             ["y", "present_key"], domain=ms, num_heads=2, unidirectional=1)],
         [x], [y, pk], inits + [past_k, past_v])
    # ONNX Runtime 1.30's CPU kernel leaves the past out of this output
    # (present_key is right), so the reference is the documented formula.
    w = [numpy_helper.to_array(i) for i in inits]
    xv = RNG.normal(size=[2, 4, 16]).astype(np.float32)
    pkv, pvv = (numpy_helper.to_array(t) for t in (past_k, past_v))
    keys = np.concatenate([pkv, split_heads(xv @ w[1], 2)], 2)
    values = np.concatenate([pvv, split_heads(xv @ w[2], 2)], 2)
    yv = reference_attention(split_heads(xv @ w[0], 2), keys, values,
                             1 / np.sqrt(8), causal=True)
    save_data(out, "mha_past", [("input", 0, "x", xv), ("output", 0, "y", yv),
                                ("output", 1, "present_key", keys)])
    nodes, inits = projections([16, 16, 16])
    heads = ints("heads_shape", [0, 0, 2, 8], np.int64)
    for i in (1, 2):
        nodes += [helper.make_node("Reshape", [f"p{i}", "heads_shape"],
                                   [f"r{i}"]),
                  helper.make_node("Transpose", [f"r{i}"], [f"h{i}"],
                                   perm=[0, 2, 1, 3])]
    raw = ints("raw_mask", [[1, 1, 1, 0], [1, 0, 1, 1]])
    save(out, "mha_bnsh",
         nodes + [helper.make_node(
             "MultiHeadAttention", ["p0", "h1", "h2", "", "raw_mask"], ["y"],
             domain=ms, num_heads=2)],
         [x], [y], inits + [heads, raw])


def group_query_attention(out, x, y):
    """com.microsoft GroupQueryAttention (2 query heads, 1 key/value head of
    8: ONNX Runtime's CPU kernel needs head sizes that are multiples of 8): separate Q/K/V (causal); packed QKV with rotary embedding and a local
    window; a past cache with present outputs and an attention_bias."""
    ms = "com.microsoft"
    nodes, inits = projections([16, 8, 8])
    save(out, "gqa_separate",
         nodes + [helper.make_node(
             "GroupQueryAttention", ["p0", "p1", "p2", "", "", "seqlens_k",
                                     "total_len"], ["y"], domain=ms,
             num_heads=2, kv_num_heads=1)],
         [x], [y], inits + [ints("seqlens_k", [3, 3]),
                            ints("total_len", 4)])
    # Rotary needs head sizes that are multiples of 16 in ORT's kernel:
    # 2 + 1 + 1 heads of 16, projected back to 16 after attention.
    nodes, inits = projections([64])
    angles = np.outer(np.arange(16), 1.0 / 10000 ** (np.arange(8) / 8))
    cos = numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos")
    sin = numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")
    wo = const("wo", [32, 16], lambda v: 0.3 * v)
    save(out, "gqa_packed_rotary",
         nodes + [helper.make_node(
             "GroupQueryAttention", ["p0", "", "", "", "", "seqlens_k",
                                     "total_len", "cos", "sin"], ["attn"],
             domain=ms, num_heads=2, kv_num_heads=1, do_rotary=1,
             local_window_size=2),
             helper.make_node("MatMul", ["attn", "wo"], ["y"])],
         [x], [y], inits + [ints("seqlens_k", [3, 3]), ints("total_len", 4),
                            cos, sin, wo])
    # A decoding step (ORT needs one new token per batch entry with a past):
    # the last position of x attends to 3 cached positions and itself.
    nodes, inits = projections([16, 8, 8], "last")
    nodes.insert(0, helper.make_node("Slice", ["x", "starts", "ends",
                                               "axes"], ["last"]))
    inits += [ints("starts", [3], np.int64), ints("ends", [4], np.int64),
              ints("axes", [1], np.int64)]
    past_k = const("past_key", [2, 1, 3, 8])
    past_v = const("past_value", [2, 1, 3, 8])
    attn_bias = const("attn_bias", [2, 1, 1, 4], lambda v: 0.5 * v)
    y1 = helper.make_tensor_value_info("y", T.FLOAT, ["batch", 1, 16])
    pv = helper.make_tensor_value_info("present_value", T.FLOAT,
                                       ["batch", 1, 4, 8])
    save(out, "gqa_past",
         nodes + [helper.make_node(
             "GroupQueryAttention", ["p0", "p1", "p2", "past_key",
                                     "past_value", "seqlens_k", "total_len",
                                     "", "", "", "attn_bias"],
             ["y", "", "present_value"], domain=ms, num_heads=2,
             kv_num_heads=1, scale=0.4)],
         [x], [y1, pv], inits + [ints("seqlens_k", [3, 3]),
                                 ints("total_len", 4), past_k, past_v,
                                 attn_bias])
    # ONNX Runtime 1.30's CPU kernel mixes up the past in this decoding
    # step (its attention weights do not sum to one; present_value is
    # right), so the reference is the documented formula.
    w = [numpy_helper.to_array(i) for i in inits[:3]]
    xv = RNG.normal(size=[2, 4, 16]).astype(np.float32)
    last = xv[:, 3:4]
    pkv, pvv, bv = (numpy_helper.to_array(t)
                    for t in (past_k, past_v, attn_bias))
    keys = np.concatenate([pkv, split_heads(last @ w[1], 1)], 2)
    values = np.concatenate([pvv, split_heads(last @ w[2], 1)], 2)
    yv = reference_attention(split_heads(last @ w[0], 2), keys, values, 0.4,
                             bias=bv, causal=True)
    save_data(out, "gqa_past", [("input", 0, "x", xv), ("output", 0, "y", yv),
                                ("output", 1, "present_value", values)])


if __name__ == "__main__":
    main()
