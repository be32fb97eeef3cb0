# Writes input_0.pb (x) and input_1.pb (ids) of the toy model
# (toy-model.py) in the ONNX backend-test layout into the folder argv[1].
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

os.makedirs(sys.argv[1], exist_ok=True)
x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
ids = np.array([4, 0, 3, 1], dtype=np.int64)
for i, (name, a) in enumerate([("x", x), ("ids", ids)]):
    onnx.save_tensor(numpy_helper.from_array(a, name),
                     os.path.join(sys.argv[1], f"input_{i}.pb"))
