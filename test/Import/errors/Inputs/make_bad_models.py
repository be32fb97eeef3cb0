#!/usr/bin/python3
"""Writes the malformed and unsupported ONNX models of test/Import/errors.

Usage: make_bad_models.py OUTDIR [CASE ...]

Writes OUTDIR/CASE.onnx for each named case (all cases when none is named).
The models are built with onnx.helper and are deliberately NOT passed through
onnx.checker: most of them are invalid. The not-a-protobuf and truncated
cases are raw bytes.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=(),
          value_info=(), ir_version=8):
    graph = helper.make_graph(list(nodes), "bad", list(inputs), list(outputs),
                              initializer=list(initializers),
                              value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)] if opset is not None else []
    opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = ir_version
    return m


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def relu_model(**kw):
    """x:f32[2,3] -> Relu -> y (a good model, the base of several cases)."""
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], **kw)


def const_i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def external(name, dims, location, **fields):
    t = TensorProto()
    t.name = name
    t.data_type = F
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)] + list(fields.items())
    for key, value in entries:
        e = t.external_data.add()
        e.key = key
        e.value = str(value)
    return t


def matmul_with_weight(weight):
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm0")],
                 [vi("x", F, [2, 4])], [vi("y", F, [2, 3])],
                 initializers=[weight])


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# --- File-level problems ----------------------------------------------------

@case
def not_protobuf():
    # 0x0f: field 1 with wire type 7, which does not exist.
    return b"\x0fthis is not an ONNX model\n"


@case
def truncated():
    data = relu_model().SerializeToString()
    return data[: len(data) // 2]


@case
def empty_file():
    return b""


@case
def no_graph():
    m = onnx.ModelProto()
    m.ir_version = 8
    m.opset_import.add().version = 17
    return m


@case
def empty_graph():
    # Valid protobuf, a graph without nodes (y is x).
    return model([], [vi("x", F, [2])], [vi("x", F, [2])])


# --- Ops, domains, opsets ----------------------------------------------------

@case
def unsupported_op():
    return model([helper.make_node("Relu", ["x"], ["r"], name="relu0"),
                  helper.make_node("NonMaxSuppression", ["r"], ["y"],
                               name="nms0")],
                 [vi("x", F, [2, 3])], [vi("y", F, None)])


@case
def unsupported_domain():
    return model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob0",
                                   domain="com.example")],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                 extra_opsets=[("com.example", 1)])


@case
def unknown_domain():
    # The node's domain has no opset_import entry.
    return model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob0",
                                   domain="com.unknown")],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])


@case
def unused_unknown_opset():
    # An opset_import of a domain no node uses is harmless.
    return relu_model(extra_opsets=[("org.nowhere", 3)])


@case
def opset_too_new():
    return relu_model(opset=25)


@case
def opset_invalid():
    return relu_model(opset=0)


@case
def op_too_old():
    # Cast exists since opset 1; stpar imports it from opset 6 on.
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast0",
                                   to=TensorProto.INT64)],
                 [vi("x", F, [2])], [vi("y", I64, [2])], opset=5)


@case
def subgraph():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then",
                             [], [vi("t", F, [2])])
    return model([helper.make_node("If", ["c"], ["y"], name="if0",
                                   then_branch=then, else_branch=then)],
                 [vi("c", TensorProto.BOOL, []), vi("x", F, [2])],
                 [vi("y", F, [2])])


# --- Graph structure ------------------------------------------------------

@case
def cycle():
    return model([helper.make_node("Relu", ["x"], ["a"], name="head"),
                  helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
                  helper.make_node("Relu", ["b"], ["c"], name="loop_relu"),
                  helper.make_node("Relu", ["b"], ["y"], name="tail")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def self_loop():
    return model([helper.make_node("Add", ["x", "y"], ["y"], name="self0")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def dangling_input():
    return model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add0")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def unproduced_output():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, [2])], [vi("y", F, [2]), vi("z", F, [2])])


@case
def duplicate_output():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0"),
                  helper.make_node("Neg", ["x"], ["y"], name="neg0")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def output_shadows_input():
    return model([helper.make_node("Relu", ["x"], ["x"], name="relu0")],
                 [vi("x", F, [2])], [vi("x", F, [2])])


@case
def duplicate_graph_input():
    return model([helper.make_node("Add", ["x", "x"], ["y"], name="add0")],
                 [vi("x", F, [2]), vi("x", F, [3])], [vi("y", F, [2])])


@case
def duplicate_initializer():
    return model([helper.make_node("Add", ["x", "c"], ["y"], name="add0")],
                 [vi("x", I64, [2])], [vi("y", I64, [2])],
                 initializers=[const_i64("c", [1, 2]),
                               const_i64("c", [3, 4, 5])])


@case
def out_of_order():
    # Valid: nodes listed consumers first.
    return model([helper.make_node("Neg", ["b"], ["y"], name="last"),
                  helper.make_node("Relu", ["a"], ["b"], name="middle"),
                  helper.make_node("Sigmoid", ["x"], ["a"], name="first")],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])


@case
def unnamed_node():
    return model([helper.make_node("MatMul", ["x", "x"], ["y"])],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])


# --- Node arity and attributes ---------------------------------------------

@case
def missing_input():
    return model([helper.make_node("MatMul", ["x"], ["y"], name="mm0")],
                 [vi("x", F, [2, 2])], [vi("y", F, [2, 2])])


@case
def missing_input_const():
    # All given inputs constant: the host folder must not run on a node
    # that lacks a required input.
    return model([helper.make_node("Gather", ["c"], ["y"], name="gather0")],
                 [], [vi("y", I64, None)],
                 initializers=[const_i64("c", [1, 2, 3])])


@case
def no_inputs_at_all():
    return model([helper.make_node("Add", [], ["y"], name="add0")],
                 [], [vi("y", F, None)])


@case
def empty_required_input():
    return model([helper.make_node("Where", ["", "x", "x"], ["y"],
                                   name="where0")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def too_many_inputs():
    return model([helper.make_node("Relu", ["x", "x"], ["y"], name="relu0")],
                 [vi("x", F, [2])], [vi("y", F, [2])])


@case
def missing_attribute():
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast0")],
                 [vi("x", F, [2])], [vi("y", I64, [2])])


@case
def attribute_type_mismatch():
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="gather0")
    a = node.attribute.add()
    a.name = "axis"
    a.type = onnx.AttributeProto.STRING
    a.s = b"1"
    return model([node], [vi("x", F, [2, 3])], [vi("y", F, [2])],
                 initializers=[const_i64("i", [0, 1])])


@case
def attribute_type_missing():
    # No `type` field, and the payload (f) is not what the schema wants (i).
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax0")
    a = node.attribute.add()
    a.name = "axis"
    a.f = 1.0
    return model([node], [vi("x", F, [2, 3])], [vi("y", F, [2, 3])])


@case
def contrib_attribute_type_mismatch():
    # com.microsoft has no ONNX schema; the handler's getInt sees a FLOAT.
    node = helper.make_node("Attention", ["x", "w"], ["y"], name="attn0",
                            domain="com.microsoft")
    a = node.attribute.add()
    a.name = "num_heads"
    a.type = onnx.AttributeProto.FLOAT
    a.f = 2.0
    w = numpy_helper.from_array(np.zeros((4, 12), dtype=np.float32), "w")
    return model([node], [vi("x", F, [1, 2, 4])], [vi("y", F, [1, 2, 4])],
                 initializers=[w], extra_opsets=[("com.microsoft", 1)])


@case
def constant_sparse():
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", F, [1], [1.0]),
        helper.make_tensor("i", I64, [1], [0]), [4])
    node = helper.make_node("Constant", [], ["y"], name="const0",
                            sparse_value=sparse)
    return model([node], [], [vi("y", F, [4])])


@case
def constant_no_value():
    return model([helper.make_node("Constant", [], ["y"], name="const0")],
                 [], [vi("y", F, None)])


@case
def reshape_mismatch():
    return model([helper.make_node("Reshape", ["x", "s"], ["y"],
                                   name="reshape0")],
                 [vi("x", F, [3, 4])], [vi("y", F, [2, 5])],
                 initializers=[const_i64("s", [2, 5])])


@case
def reshape_mismatch_const():
    # Folded on the host (constant data): one diagnostic, not two.
    return model([helper.make_node("Reshape", ["c", "s"], ["y"],
                                   name="reshape0")],
                 [], [vi("y", I64, [2, 5])],
                 initializers=[const_i64("c", list(range(12))),
                               const_i64("s", [2, 5])])


@case
def matmul_mismatch():
    return model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm0")],
                 [vi("a", F, [2, 3]), vi("b", F, [4, 5])],
                 [vi("y", F, [2, 5])])


# --- Dims ---------------------------------------------------------------------

@case
def symbolic():
    # Three symbolic dims and one unnamed one.
    return model([helper.make_node("Add", ["x", "m"], ["y"], name="add0")],
                 [vi("x", F, ["batch", "seq", 8]), vi("m", F, ["seq", None])],
                 [vi("y", F, ["batch", "seq", 8])])


@case
def symbolic_named():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, ["batch", "seq"])], [vi("y", F, ["batch", "seq"])])


@case
def negative_dim():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, [2, -3])], [vi("y", F, [2, -3])])


@case
def huge_dim():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, [2, 1 << 41])], [vi("y", F, [2, 1 << 41])])


@case
def huge_elements():
    # Each dim is fine, their product overflows int64.
    d = 1 << 40
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                 [vi("x", F, [d, d])], [vi("y", F, [d, d])])


@case
def initializer_negative_dim():
    w = external("w", [4, -3], "weights.bin")
    return matmul_with_weight(w)


# --- dtypes ------------------------------------------------------------------

@case
def input_string_dtype():
    return model([helper.make_node("Identity", ["x"], ["y"], name="id0")],
                 [vi("x", TensorProto.STRING, [2])],
                 [vi("y", TensorProto.STRING, [2])])


@case
def input_invalid_dtype():
    m = model([helper.make_node("Identity", ["x"], ["y"], name="id0")],
              [vi("x", F, [2])], [vi("y", F, [2])])
    m.graph.input[0].type.tensor_type.elem_type = 999
    return m


@case
def input_not_tensor():
    seq = helper.make_tensor_sequence_value_info("x", F, [2])
    return model([helper.make_node("Identity", ["x"], ["y"], name="id0")],
                 [seq], [vi("y", F, [2])])


@case
def input_no_type():
    m = model([helper.make_node("Identity", ["x"], ["y"], name="id0")],
              [vi("x", F, [2])], [vi("y", F, [2])])
    m.graph.input[0].ClearField("type")
    return m


@case
def input_no_shape():
    m = model([helper.make_node("Identity", ["x"], ["y"], name="id0")],
              [vi("x", F, [2])], [vi("y", F, [2])])
    m.graph.input[0].type.tensor_type.ClearField("shape")
    return m


@case
def initializer_string_dtype():
    w = helper.make_tensor("w", TensorProto.STRING, [2], [b"a", b"b"])
    return model([helper.make_node("Identity", ["w"], ["y"], name="id0")],
                 [], [vi("y", TensorProto.STRING, [2])], initializers=[w])


@case
def unknown_attribute():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0",
                                   foo=1)],
                 [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], opset=13)


@case
def unknown_attribute_newer_ir():
    # The same node in a model of an IR version newer than this ONNX
    # library's (8): the checker's finding is only a warning there.
    m = unknown_attribute()
    m.ir_version = 10
    return m


def group_query_attention(seqlens, total):
    """GroupQueryAttention (2 query heads, 1 key/value head of 4) with the
    given seqlens_k and total_sequence_length."""
    q, k, v = vi("q", F, [2, 3, 8]), vi("k", F, [2, 3, 4]), vi("v", F, [2, 3, 4])
    inits = [numpy_helper.from_array(np.array(seqlens, np.int32), "seqlens"),
             numpy_helper.from_array(np.array(total, np.int32), "total")]
    node = helper.make_node("GroupQueryAttention",
                            ["q", "k", "v", "", "", "seqlens", "total"], ["y"],
                            name="gqa0", domain="com.microsoft", num_heads=2,
                            kv_num_heads=1)
    return model([node], [q, k, v], [vi("y", F, [2, 3, 8])], inits,
                 extra_opsets=[("com.microsoft", 1)])


@case
def gqa_ragged():
    # Batch entry 0 has 2 keys, entry 1 has 3: a ragged batch.
    return group_query_attention([1, 2], 3)


@case
def gqa_shared_buffer():
    # total_sequence_length 5 with no past and 3 new tokens.
    return group_query_attention([4, 4], 5)


@case
def mha_cache_indirection():
    q = vi("q", F, [2, 3, 8])
    ind = numpy_helper.from_array(np.zeros([2, 1, 3], np.int32), "ind")
    node = helper.make_node("MultiHeadAttention",
                            ["q", "q", "q", "", "", "", "", "", "", "ind"],
                            ["y"], name="mha0", domain="com.microsoft",
                            num_heads=2)
    return model([node], [q], [vi("y", F, [2, 3, 8])], [ind],
                 extra_opsets=[("com.microsoft", 1)])


@case
def unsigned_initializer():
    # A uint8 table too large to fold on the host: a parameter.
    w = numpy_helper.from_array(np.full([64, 80], 200, dtype=np.uint8), "w")
    return model([helper.make_node("Cast", ["w"], ["y"], name="cast0",
                                   to=F)],
                 [], [vi("y", F, [64, 80])], initializers=[w])


@case
def unsigned_input():
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast0",
                                   to=F)],
                 [vi("x", TensorProto.UINT8, [2])], [vi("y", F, [2])])


@case
def cast_unsigned():
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast0",
                                   to=TensorProto.UINT16)],
                 [vi("x", F, [2])], [vi("y", TensorProto.UINT16, [2])])


@case
def cast_bad_dtype():
    return model([helper.make_node("Cast", ["x"], ["y"], name="cast0",
                                   to=TensorProto.COMPLEX64)],
                 [vi("x", F, [2])], [vi("y", TensorProto.COMPLEX64, [2])])


@case
def value_info_no_type():
    m = relu_model()
    m.graph.value_info.add().name = "y"
    return m


# --- Initializers and external data ---------------------------------------

@case
def external_absent():
    return matmul_with_weight(external("w", [4, 3], "absent_weights.bin",
                                       offset=0, length=48))


@case
def external_present():
    return matmul_with_weight(external("w", [4, 3], "present_weights.bin",
                                       offset=64, length=48))


@case
def external_bad_offset():
    return matmul_with_weight(external("w", [4, 3], "weights.bin",
                                       offset="-16", length=48))


@case
def external_bad_length():
    return matmul_with_weight(external("w", [4, 3], "weights.bin",
                                       offset=0, length="forty-eight"))


@case
def external_wrong_length():
    # 4 x 3 floats are 48 bytes.
    return matmul_with_weight(external("w", [4, 3], "weights.bin",
                                       offset=0, length=40))


@case
def external_past_end():
    # present_weights.bin holds 112 bytes.
    return matmul_with_weight(external("w", [4, 3], "present_weights.bin",
                                       offset=100, length=48))


@case
def external_no_location():
    w = external("w", [4, 3], "")
    return matmul_with_weight(w)


@case
def external_escapes():
    return matmul_with_weight(external("w", [4, 3], "../../etc/passwd"))


@case
def external_symlink():
    # w.bin is made a symbolic link to a file outside the model's folder by
    # the test.
    return matmul_with_weight(external("w", [4, 3], "w.bin"))


@case
def input_initializer_conflict():
    # The graph input w (an overridable initializer) is declared [3, 4];
    # its initializer is [4, 3].
    m = matmul_with_weight(numpy_helper.from_array(
        np.zeros((4, 3), dtype=np.float32), "w"))
    m.graph.input.append(helper.make_tensor_value_info("w", F, [3, 4]))
    return m


@case
def initializer_short_raw():
    w = numpy_helper.from_array(np.zeros((4, 3), dtype=np.float32), "w")
    w.raw_data = w.raw_data[:20]
    return matmul_with_weight(w)


@case
def initializer_no_data():
    w = TensorProto()
    w.name = "w"
    w.data_type = F
    w.dims.extend([4, 3])
    return matmul_with_weight(w)


@case
def initializer_short_int():
    # A small integer initializer (a host constant) with too few values.
    c = const_i64("s", [4, 3])
    c.ClearField("raw_data")
    c.int64_data.append(4)
    return model([helper.make_node("Reshape", ["x", "s"], ["y"],
                                   name="reshape0")],
                 [vi("x", F, [3, 4])], [vi("y", F, [4, 3])],
                 initializers=[c])


# --- Hostile values reaching op handlers ------------------------------------

@case
def split_zero_outputs():
    # num_outputs = 0 used to divide by zero.
    return model([helper.make_node("Split", ["x"], ["y"], name="split0",
                                   axis=0, num_outputs=0)],
                 [vi("x", F, [4])], [vi("y", F, [4])], opset=18)


@case
def constant_of_shape_negative():
    return model([helper.make_node("ConstantOfShape", ["s"], ["y"],
                                   name="cos0")],
                 [], [vi("y", F, None)],
                 initializers=[const_i64("s", [-1, 3])])


@case
def expand_negative():
    return model([helper.make_node("Expand", ["x", "s"], ["y"],
                                   name="expand0")],
                 [vi("x", F, [1, 3])], [vi("y", F, None)],
                 initializers=[const_i64("s", [-2, 3])])


@case
def topk_empty_k():
    return model([helper.make_node("TopK", ["x", "k"], ["v", "i"],
                                   name="topk0")],
                 [vi("x", F, [2, 5])], [vi("v", F, None), vi("i", I64, None)],
                 initializers=[const_i64("k", np.zeros((0,), np.int64))])


@case
def trilu_empty_k():
    return model([helper.make_node("Trilu", ["x", "k"], ["y"], name="trilu0")],
                 [vi("x", F, [3, 3])], [vi("y", F, [3, 3])],
                 initializers=[const_i64("k", np.zeros((0,), np.int64))])


@case
def range_empty():
    return model([helper.make_node("Range", ["a", "b", "c"], ["y"],
                                   name="range0")],
                 [], [vi("y", I64, None)],
                 initializers=[const_i64("a", np.zeros((0,), np.int64)),
                               const_i64("b", [4]), const_i64("c", [1])])


@case
def unsqueeze_duplicate_axes():
    return model([helper.make_node("Unsqueeze", ["x", "a"], ["y"],
                                   name="unsq0")],
                 [vi("x", F, [3])], [vi("y", F, None)],
                 initializers=[const_i64("a", [0, 0])])


@case
def split_negative_sizes():
    return model([helper.make_node("Split", ["x", "s"], ["y", "z"],
                                   name="split0", axis=0)],
                 [vi("x", F, [3])], [vi("y", F, None), vi("z", F, None)],
                 initializers=[const_i64("s", [5, -2])])


@case
def einsum_unknown_letter():
    return model([helper.make_node("Einsum", ["x"], ["y"], name="einsum0",
                                   equation="ij->ik")],
                 [vi("x", F, [2, 3])], [vi("y", F, None)])


@case
def constant_huge_dims():
    t = TensorProto()
    t.name = "v"
    t.data_type = F
    t.dims.extend([1 << 40, 1 << 40])
    t.float_data.append(1.0)
    return model([helper.make_node("Constant", [], ["y"], name="const0",
                                   value=t)],
                 [], [vi("y", F, None)])


@case
def reshape_huge_target():
    return model([helper.make_node("Reshape", ["x", "s"], ["y"],
                                   name="reshape0")],
                 [vi("x", F, [2, 3])], [vi("y", F, None)],
                 initializers=[const_i64("s", [1 << 40, 1 << 40, 0])])


@case
def slice_min_step():
    return model([helper.make_node("Slice", ["x", "b", "e", "a", "st"], ["y"],
                                   name="slice0")],
                 [vi("x", F, [4])], [vi("y", F, None)],
                 initializers=[const_i64("b", [3]), const_i64("e", [0]),
                               const_i64("a", [0]),
                               const_i64("st", [-(1 << 63)])])


@case
def gather_const_index_out_of_range():
    return model([helper.make_node("Gather", ["x", "i"], ["y"],
                                   name="gather0", axis=0)],
                 [vi("x", F, [3, 2])], [vi("y", F, None)],
                 initializers=[const_i64("i", 7)])


@case
def div_int_min():
    return model([helper.make_node("Div", ["a", "b"], ["y"], name="div0")],
                 [], [vi("y", I64, [1])],
                 initializers=[const_i64("a", [-(1 << 63)]),
                               const_i64("b", [-1])])


@case
def layernorm_bad_scale():
    w = numpy_helper.from_array(np.ones((5,), dtype=np.float32), "w")
    return model([helper.make_node("LayerNormalization", ["x", "w"], ["y"],
                                   name="ln0")],
                 [vi("x", F, [2, 4])], [vi("y", F, [2, 4])],
                 initializers=[w])


@case
def attention_bad_heads():
    w = numpy_helper.from_array(np.zeros((4, 12), dtype=np.float32), "w")
    return model([helper.make_node("Attention", ["x", "w"], ["y"],
                                   name="attn0", domain="com.microsoft",
                                   num_heads=3)],
                 [vi("x", F, [1, 2, 4])], [vi("y", F, None)],
                 initializers=[w], extra_opsets=[("com.microsoft", 1)])


@case
def attention_rank2_weight():
    w = numpy_helper.from_array(np.zeros((12,), dtype=np.float32), "w")
    return model([helper.make_node("Attention", ["x", "w"], ["y"],
                                   name="attn0", domain="com.microsoft",
                                   num_heads=2)],
                 [vi("x", F, [1, 2, 4])], [vi("y", F, None)],
                 initializers=[w], extra_opsets=[("com.microsoft", 1)])


@case
def embed_layernorm_bad():
    f = lambda n, s: numpy_helper.from_array(np.zeros(s, np.float32), n)
    return model([helper.make_node("EmbedLayerNormalization",
                                   ["ids", "", "we", "pe", "", "g", "b"],
                                   ["y"], name="eln0",
                                   domain="com.microsoft")],
                 [vi("ids", TensorProto.INT32, [1, 4])], [vi("y", F, None)],
                 initializers=[f("we", (10,)), f("pe", (2, 8)),
                               f("g", (8,)), f("b", (8,))],
                 extra_opsets=[("com.microsoft", 1)])


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or sorted(CASES)
    os.makedirs(out, exist_ok=True)
    for name in names:
        m = CASES[name]()
        data = m if isinstance(m, bytes) else m.SerializeToString()
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(data)
    if "external_present" in names or "external_past_end" in names:
        with open(os.path.join(out, "present_weights.bin"), "wb") as f:
            f.write(bytes(64 + 48))


if __name__ == "__main__":
    main()
