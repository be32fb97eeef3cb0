"""Checks stpar_zoo's numpy interpreter against PyTorch's own forward results
stored next to real torch 1.13 exports (ONNX backend-test layout):
usage: eval_reference.py SRC_ROOT MODEL_DIR..."""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(sys.argv[1], "python"))
from stpar_zoo.evaluate import run  # noqa: E402

status = 0
for d in sys.argv[2:]:
    model = onnx.load(os.path.join(d, "model.onnx"))
    weights = {t.name: numpy_helper.to_array(t)
               for t in model.graph.initializer}

    def tensor(name):
        t = onnx.TensorProto()
        with open(os.path.join(d, "test_data_set_0", name), "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)

    x, want = tensor("input_0.pb"), tensor("output_0.pb")
    got = run(model, {model.graph.input[0].name: x}, weights)
    got = got[model.graph.output[0].name]
    err = float(np.abs(got - want).max())
    ok = got.shape == want.shape and err < 1e-4
    status |= not ok
    print(f"{'ok' if ok else 'FAIL'}: {os.path.basename(d)} "
          f"max abs error {'<' if err < 1e-4 else '>='} 1e-4")
sys.exit(status)
