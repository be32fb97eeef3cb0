"""insert-op.py IN.onnx OUT.onnx TENSOR: inserts `Mul(TENSOR, 1.0)` (node
'/inserted/Mul') right after TENSOR's producer and makes every other
consumer read its output: the same model with one more operator early in
the function body, so every later op moves by one position."""
import sys

import onnx
from onnx import TensorProto, helper

src, dst, tensor = sys.argv[1:4]
model = onnx.load(src)
graph = model.graph
out = tensor + "_inserted"
for node in graph.node:
    for i, name in enumerate(node.input):
        if name == tensor:
            node.input[i] = out
producer = next(i for i, n in enumerate(graph.node) if tensor in n.output)
graph.initializer.append(
    helper.make_tensor("inserted_one", TensorProto.FLOAT, [], [1.0]))
graph.node.insert(producer + 1, helper.make_node(
    "Mul", [tensor, "inserted_one"], [out], name="/inserted/Mul"))
onnx.save(model, dst)
