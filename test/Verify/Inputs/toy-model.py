# Writes the toy model of verify-plumbing.test: y = 2 x + 1 + T[ids],
# with x float32 [4, 6], ids int64 [4] and T[r, c] = 10 r + c ([5, 6]).
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

table = (10 * np.arange(5)[:, None] + np.arange(6)[None, :]).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("Mul", ["x", "two"], ["x2"]),
     helper.make_node("Add", ["x2", "one"], ["x21"]),
     helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
     helper.make_node("Add", ["x21", "rows"], ["y"])],
    "toy",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
     helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
    [numpy_helper.from_array(np.array(2, np.float32), "two"),
     numpy_helper.from_array(np.array(1, np.float32), "one"),
     numpy_helper.from_array(table, "table")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, sys.argv[1])
