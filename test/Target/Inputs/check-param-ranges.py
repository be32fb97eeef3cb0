#!/usr/bin/env python3
"""check-param-ranges.py MODULE.mlir MODELDIR: for every `#stp.param` with a
`file`, reads the bytes at [offset, offset + length) of MODELDIR/file and
compares them with the initializer's values as the onnx Python package
decodes them (an independent reader of the model). Prints
"N parameters, M in place, all bytes equal" or the first mismatch (exit 1).
External ranges are only counted.
"""
import re
import sys

import onnx
from onnx import numpy_helper

PARAM = re.compile(r'#stp\.param<name = "([^"]+)", data = (\w+)'
                   r'(?:, file = "([^"]+)")?(?:, offset = (\d+))?'
                   r'(?:, length = (-?\d+))?')


def main():
    module, model_dir = sys.argv[1:3]
    text = open(module).read()
    params = PARAM.findall(text)
    models = {}
    in_place = 0
    for name, data, file, offset, length in params:
        if not file:
            continue
        path = model_dir + "/" + file
        # Embedded data is checked against the onnx package's decoding;
        # external ranges are the model's own (stpar verify runs them).
        model = (models.setdefault(path, onnx.load(path))
                 if data == "embedded" else None)
        blob = open(path, "rb").read()
        offset = int(offset or 0)
        length = int(length)
        got = blob[offset:offset + length]
        if model is not None:
            init = next(t for t in model.graph.initializer if t.name == name)
            want = numpy_helper.to_array(init).tobytes()
            if got != want:
                print(f"parameter '{name}': the {length} bytes at {offset} "
                      f"of {file} are not its values")
                return 1
        in_place += 1
    print(f"{len(params)} parameters, {in_place} in place, all bytes equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
