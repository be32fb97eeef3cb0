#!/usr/bin/env python3
# make-moe-variants.py OUT_DIR - small dense top-k MoE layers written the
# way exporters write them (every expert on every token, masked by the
# scattered gates), in the variants -stp-normalize must tell apart:
#   gelu-plain     GELU (erf form, as separate ONNX ops) non-gated experts,
#                  gates not renormalized, the router a Gemm with transB
#                  (its weight [E, D])
#   relu-gated     ReLU gated experts (relu(x w1) * (x w3)), top-1
#   tanh-gated     tanh gated experts: no activation stp.moe knows, so the
#                  layer must stay dense
# Each gets <OUT_DIR>/<name>/model.onnx with weights in the file (seeded).
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, F, E, T = 16, 24, 4, 8


def build(name, act, gated, top_k, renorm, router_transposed):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    nodes, inits = [], []

    def w(n, shape, scale=0.3):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), n))
        return n

    def c(n, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype), n))
        return n

    def op(kind, ins, out, **attrs):
        nodes.append(helper.make_node(kind, ins, [out] if isinstance(out, str)
                                      else out, name="/" + out if
                                      isinstance(out, str) else "/" + out[0],
                                      **attrs))
        return out

    flat = op("Reshape", ["hidden", c("shape", [-1, D])], "flat")
    if router_transposed:
        logits = op("Gemm", [flat, w("router", [E, D])], "logits", transB=1)
    else:
        logits = op("MatMul", [flat, w("router", [D, E])], "logits")
    probs = op("Softmax", [logits], "probs", axis=-1)
    op("TopK", [probs, c("k", [top_k])], ["vals", "idx"], axis=-1, largest=1,
       sorted=1)
    gate = "vals"
    if renorm:
        s = op("ReduceSum", ["vals", c("axes", [-1])], "vsum", keepdims=1)
        gate = op("Div", ["vals", s], "gate")
    zeros = op("ConstantOfShape", [op("Shape", [probs], "pshape")], "zeros",
               value=numpy_helper.from_array(np.array([0.0], np.float32)))
    gates = op("ScatterElements", [zeros, "idx", gate], "gates", axis=1)
    a = op("Einsum", [flat, w("w1", [E, D, F])], "a", equation="nd,edf->enf")
    if act == "gelu":
        half = c("half", [0.5], np.float32)
        r2 = c("sqrt2", [np.sqrt(2.0)], np.float32)
        one = c("one", [1.0], np.float32)
        t = op("Div", [a, r2], "a_div")
        t = op("Erf", [t], "a_erf")
        t = op("Add", [t, one], "a_add")
        t = op("Mul", [a, t], "a_mul")
        h = op("Mul", [t, half], "h")
    elif act == "relu":
        h = op("Relu", [a], "h")
    else:
        h = op("Tanh", [a], "h")
    if gated:
        u = op("Einsum", [flat, w("w3", [E, D, F])], "u",
               equation="nd,edf->enf")
        h = op("Mul", [h, u], "hu")
    y = op("Einsum", [h, w("w2", [E, F, D])], "y", equation="enf,efd->end")
    gt = op("Transpose", [gates], "gt", perm=[1, 0])
    gt = op("Unsqueeze", [gt, c("ax", [-1])], "gtu")
    y = op("Mul", [y, gt], "yg")
    y = op("ReduceSum", [y, c("ax0", [0])], "ysum", keepdims=0)
    op("Reshape", [y, c("oshape", [-1, T, D])], "out")
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT,
                                       ["batch", T, D])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                       ["batch", T, D])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def main():
    out = sys.argv[1]
    variants = {
        "gelu-plain": dict(act="gelu", gated=False, top_k=2, renorm=False,
                           router_transposed=True),
        "relu-gated": dict(act="relu", gated=True, top_k=1, renorm=False,
                           router_transposed=False),
        "tanh-gated": dict(act="tanh", gated=True, top_k=2, renorm=True,
                           router_transposed=False),
    }
    for name, kw in variants.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        onnx.save(build(name, **kw), os.path.join(out, name, "model.onnx"))
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
