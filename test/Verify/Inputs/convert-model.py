#!/usr/bin/python3
"""Makes test variants of an ONNX model: 16-bit floats, static dims.

usage: convert-model.py IN.onnx OUT.onnx [--dtype float16|bfloat16|float32]
                        [--static NAME=VALUE ...]

--dtype converts every float32 tensor of the model to that type: the
initializers, graph inputs and outputs, value_info, Constant tensors and
the `to` of Cast nodes (with float32 back as --dtype, it turns a converted
model back into float32 exactly: the fp32 twin ONNX Runtime can run when
it lacks 16-bit kernels). --static replaces the symbolic dim NAME by VALUE
in every graph input, output and value_info, so the model has only static
dims. Weights stay embedded in OUT.onnx.
"""

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

NUMPY = {"float16": np.float16, "float32": np.float32}
ONNX = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
        "float32": TensorProto.FLOAT}
FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}


def to_bfloat16_bits(values):
    """float32 -> bfloat16 bit patterns, rounding to nearest even."""
    values = np.atleast_1d(values.astype(np.float32))
    u = values.view(np.uint32).astype(np.uint64)
    k16, one = np.uint64(16), np.uint64(1)
    rounded = (u + np.uint64(0x7FFF) + ((u >> k16) & one)) >> k16
    nan = np.isnan(values)
    rounded[nan] = (u[nan] >> k16) | np.uint64(0x40)
    return rounded.astype(np.uint16)


def from_bfloat16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def convert_tensor(tensor, dtype):
    if tensor.data_type not in FLOATS or tensor.data_type == ONNX[dtype]:
        return tensor
    if tensor.data_type == TensorProto.BFLOAT16:
        raw = np.frombuffer(tensor.raw_data, dtype=np.uint16) \
            if tensor.raw_data else np.array(tensor.int32_data, np.uint16)
        values = from_bfloat16_bits(raw).reshape(tuple(tensor.dims))
    else:
        values = numpy_helper.to_array(tensor)
    if dtype == "bfloat16":
        out = TensorProto()
        out.name = tensor.name
        out.dims.extend(tensor.dims)
        out.data_type = TensorProto.BFLOAT16
        out.raw_data = to_bfloat16_bits(values.astype(np.float32)).tobytes()
        out.doc_string = tensor.doc_string
        return out
    out = numpy_helper.from_array(values.astype(NUMPY[dtype]), tensor.name)
    out.doc_string = tensor.doc_string
    return out


def convert_type(type_proto, dtype, static):
    tensor_type = type_proto.tensor_type
    if dtype and tensor_type.elem_type in FLOATS:
        tensor_type.elem_type = ONNX[dtype]
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_param") and dim.dim_param in static:
            value = static[dim.dim_param]
            dim.ClearField("dim_param")
            dim.dim_value = value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--dtype", choices=sorted(ONNX))
    parser.add_argument("--static", action="append", default=[],
                        metavar="NAME=VALUE")
    args = parser.parse_args()
    static = {}
    for item in args.static:
        name, _, value = item.partition("=")
        static[name] = int(value)
    model = onnx.load(args.input)
    graph = model.graph
    if args.dtype:
        converted = [convert_tensor(t, args.dtype) for t in graph.initializer]
        del graph.initializer[:]
        graph.initializer.extend(converted)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    attr.t.CopyFrom(convert_tensor(attr.t, args.dtype))
                if (node.op_type == "Cast" and attr.name == "to"
                        and attr.i in FLOATS):
                    attr.i = ONNX[args.dtype]
    for value in list(graph.input) + list(graph.output) + \
            list(graph.value_info):
        convert_type(value.type, args.dtype, static)
    onnx.save(model, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
