#!/usr/bin/env python3
"""Builds and runs a program written by `stpar emit --target cpu`, then
compares its outputs with expected ones.

  run-emitted.py DIR [--weights MODELDIR] --np N [--cmake] [--pb TESTDATA]
                 [--inputs INDIR] [--expected EXPDIR] [--rtol R] [--atol A]

DIR is the emitted directory; MODELDIR the model's folder, from which the
program reads its weights in place. Inputs come from TESTDATA/input_<i>.pb (ONNX
backend-test layout, converted to DIR/in/input_<i>.bin) or from INDIR
(input_<i>.bin). Expected outputs are TESTDATA/output_<i>.pb or
EXPDIR/output_<i>.bin. Prints one line per output with the max abs and max
rel error; exits 1 when an output is off by more than atol + rtol * |ref|.
The program is built with mpicxx directly (fast) or with the emitted
CMakeLists.txt (--cmake).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "tools", "torch-ref"))
import stpar_mpirun  # noqa: E402 (the launcher-fault retry of stpar verify)

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64,
          "int32": np.int32, "int8": np.int8, "bool": np.uint8}


def build(d, use_cmake):
    exe = os.path.join(d, "stpar_program")
    if use_cmake:
        b = os.path.join(d, "build")
        subprocess.run(["cmake", "-S", d, "-B", b, "-DCMAKE_BUILD_TYPE=Release"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", b], check=True,
                       stdout=subprocess.DEVNULL)
        return os.path.join(b, "stpar_program")
    subprocess.run(["mpicxx", "-std=c++17", "-O1", "-I", d,
                    os.path.join(d, "program.cpp"), "-o", exe], check=True)
    return exe


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--weights", default="")
    p.add_argument("--np", type=int, default=1)
    p.add_argument("--cmake", action="store_true")
    p.add_argument("--pb")
    p.add_argument("--inputs")
    p.add_argument("--expected")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-5)
    a = p.parse_args()
    io = json.load(open(os.path.join(a.dir, "io.json")))
    indir = a.inputs or os.path.join(a.dir, "in")
    outdir = os.path.join(a.dir, "out")
    os.makedirs(indir, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    if a.pb:
        import onnx
        from onnx import numpy_helper
        for i, e in enumerate(io["inputs"]):
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(a.pb, "input_%d.pb" % i), "rb").read())
            arr = numpy_helper.to_array(t).astype(DTYPES[e["dtype"]])
            assert list(arr.shape) == e["shape"], (arr.shape, e["shape"])
            arr.tofile(os.path.join(indir, e["file"]))
    exe = build(a.dir, a.cmake)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.np),
           exe] + (["--weights", a.weights] if a.weights else []) + [
           "--inputs", indir, "--outputs", outdir]
    rc, err = stpar_mpirun.run(cmd, os.path.join(a.dir, "mpirun.err.log"),
                               "run-emitted")
    sys.stderr.write(err)
    if rc != 0:
        sys.exit("run-emitted: mpirun failed (exit %d)" % rc)
    ok = True
    for i, e in enumerate(io["outputs"]):
        got = np.fromfile(os.path.join(outdir, e["file"]),
                          dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        if a.pb:
            import onnx
            from onnx import numpy_helper
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(a.pb, "output_%d.pb" % i), "rb").read())
            ref = numpy_helper.to_array(t)
        elif a.expected:
            ref = np.fromfile(os.path.join(a.expected, e["file"]),
                              dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        else:
            print("output %d (%s): %s" % (i, e["name"], got.ravel()[:8]))
            continue
        ref = ref.astype(np.float64)
        got = got.astype(np.float64)
        diff = np.abs(got - ref)
        rel = diff / np.maximum(np.abs(ref), 1e-30)
        bad = diff > a.atol + a.rtol * np.abs(ref)
        status = "FAIL" if bad.any() else "ok"
        ok = ok and not bad.any()
        print("output %d (%s): %s max_abs=%.3g max_rel=%.3g max_ref=%.3g" %
              (i, e["name"], status, diff.max(), rel.max(), np.abs(ref).max()))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
