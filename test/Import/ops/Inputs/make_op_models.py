#!/usr/bin/python3
"""Writes one small static ONNX model per op handler into a folder.

usage: make_op_models.py OUTDIR

Each model is `x -> OP -> y` (plus constant operands) named after its
case; import-ops.test imports them all and checks the IR.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def single(op, attrs=None, out_dtype=F, out_shape=(2, 3), in_dtype=F,
           in_shape=(2, 3), consts=(), opset=18, domain=""):
    """A model x -> op(x, *consts) -> y."""
    inits = [numpy_helper.from_array(np.asarray(v), name)
             for name, v in consts if name]
    node = helper.make_node(op, ["x"] + [n for n, _ in consts], ["y"],
                            name=op.lower() + "0", domain=domain,
                            **(attrs or {}))
    graph = helper.make_graph([node], op, [vi("x", in_dtype, list(in_shape))],
                              [vi("y", out_dtype, list(out_shape))], inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets)


@case
def mod_int():
    return single("Mod", in_dtype=I64, out_dtype=I64,
                  consts=[("d", np.array([3, -3, 5], np.int64))])


@case
def mod_float():
    return single("Mod", {"fmod": 1},
                  consts=[("d", np.array([1.5, -2.0, 0.7], np.float32))])


for _op in ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]:
    def _make(op=_op):
        return single(op, {"keepdims": 0}, out_shape=(2,),
                      consts=[("axes", np.array([1], np.int64))])
    _make.__name__ = _op.lower()
    case(_make)


@case
def argmax_last():
    return single("ArgMax", {"axis": 1, "select_last_index": 1},
                  out_dtype=I64, out_shape=(2, 1), opset=13)


@case
def argmin():
    return single("ArgMin", {"axis": 0, "keepdims": 0}, out_dtype=I64,
                  out_shape=(3,), opset=13)


@case
def logsoftmax():
    return single("LogSoftmax", {"axis": -1}, opset=13)


@case
def logsoftmax_opset11():
    return single("LogSoftmax", {"axis": 1}, in_shape=(2, 3, 4),
                  out_shape=(2, 3, 4), opset=11)


@case
def hardmax():
    return single("Hardmax", {"axis": 1}, opset=13)


@case
def tile():
    return single("Tile", out_shape=(4, 9),
                  consts=[("repeats", np.array([2, 3], np.int64))])


@case
def layernorm_opset12():
    return single("LayerNormalization", {"axis": -1, "epsilon": 1e-5},
                  consts=[("scale", np.ones([3], np.float32)),
                          ("bias", np.zeros([3], np.float32))], opset=12)


@case
def clip():
    return single("Clip", consts=[("lo", np.array(-0.5, np.float32)),
                                  ("hi", np.array(0.5, np.float32))],
                  opset=13)


@case
def castlike():
    return single("CastLike", out_dtype=TensorProto.DOUBLE,
                  consts=[("like", np.zeros([1], np.float64))], opset=15)


@case
def dropout():
    return single("Dropout", opset=13)


@case
def sum3():
    return single("Sum", consts=[("a", np.ones([3], np.float32)),
                                 ("b", np.ones([2, 1], np.float32))])


@case
def prelu():
    return single("PRelu", consts=[("slope", np.full([3], 0.1, np.float32))])


@case
def greaterorequal():
    return single("GreaterOrEqual", out_dtype=TensorProto.BOOL,
                  consts=[("t", np.zeros([3], np.float32))])


for _op, _attrs in [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.5}),
                    ("Selu", {}), ("Celu", {"alpha": 2.0}),
                    ("ThresholdedRelu", {"alpha": 0.5}),
                    ("HardSigmoid", {}), ("HardSwish", {}), ("Softplus", {}),
                    ("Softsign", {}), ("Sign", {}), ("Abs", {}),
                    ("Floor", {}), ("Ceil", {}), ("Log", {}), ("Sin", {}),
                    ("Cos", {}), ("Tan", {}), ("Atan", {})]:
    def _make(op=_op, attrs=_attrs):
        return single(op, attrs)
    _make.__name__ = _op.lower()
    case(_make)


@case
def attention_gqa_causal():
    # Q [B, S, 4 heads x 2] and K, V [B, S, 2 heads x 2]: grouped-query,
    # causal, softcapped, with the softmax output as qk_matmul_output.
    q, k, v = (vi("q", F, [1, 3, 8]), vi("k", F, [1, 3, 4]),
               vi("v", F, [1, 3, 4]))
    node = helper.make_node(
        "Attention", ["q", "k", "v"], ["y", "", "", "p"], name="attn0",
        q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=5.0,
        qk_matmul_output_mode=3)
    graph = helper.make_graph([node], "attention", [q, k, v],
                              [vi("y", F, [1, 3, 8]), vi("p", F, [1, 4, 3, 3])])
    return helper.make_model(graph,
                             opset_imports=[helper.make_opsetid("", 23)])


@case
def simplified_layernorm():
    return single("SimplifiedLayerNormalization", {"epsilon": 1e-6},
                  consts=[("scale", np.ones([3], np.float32))], opset=17)


@case
def skip_simplified_layernorm():
    return single("SkipSimplifiedLayerNormalization", {"epsilon": 1e-6},
                  consts=[("skip", np.ones([2, 3], np.float32)),
                          ("gamma", np.ones([3], np.float32))],
                  domain="com.microsoft")


@case
def bias_gelu():
    return single("BiasGelu", consts=[("bias", np.ones([3], np.float32))],
                  domain="com.microsoft")


@case
def mha_packed_qkv():
    # com.microsoft MultiHeadAttention on packed QKV [B, S, N=2, 3, H=8].
    return single("MultiHeadAttention", {"num_heads": 2},
                  in_shape=(2, 4, 2, 3, 8), out_shape=(2, 4, 16),
                  domain="com.microsoft")


@case
def mha_packed_kv():
    # Query [B, S, 16], packed KV [B, L=5, N=2, 2, H=8], causal.
    return single("MultiHeadAttention", {"num_heads": 2, "unidirectional": 1},
                  in_shape=(2, 4, 16), out_shape=(2, 4, 16),
                  consts=[("kv", np.ones([2, 5, 2, 2, 8], np.float32))],
                  domain="com.microsoft")


@case
def gqa_packed_window():
    # Packed [Q, K, V] of 4 + 2 + 2 heads of 2, a local window of 2 keys.
    return single("GroupQueryAttention",
                  {"num_heads": 4, "kv_num_heads": 2, "local_window_size": 2},
                  in_shape=(1, 3, 16), out_shape=(1, 3, 8),
                  consts=[("", None), ("", None), ("", None), ("", None),
                          ("seqlens_k", np.array([2], np.int32)),
                          ("total", np.array(3, np.int32))],
                  domain="com.microsoft")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fn in CASES.items():
        onnx.save(fn(), os.path.join(out, name + ".onnx"))
    print("\n".join(CASES))


if __name__ == "__main__":
    main()
