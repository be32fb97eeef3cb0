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


if __name__ == "__main__":
    main()
