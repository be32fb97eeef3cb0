#!/usr/bin/env python3
# moe-skewed-input.py - an input for torch113_moe_top2_op17 whose routing is
# skewed: most tokens prefer one expert. Each token is a multiple of the
# router column of the expert (so its logit dominates) plus noise; the
# script prints the share of first choices that expert gets.
#
#   moe-skewed-input.py MODEL_DIR OUT_DIR --batch B --seq S [--expert X]
import argparse
import os

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--expert", type=int, default=0)
    args = ap.parse_args()
    model = onnx.load(os.path.join(args.model_dir, "model.onnx"))
    # The router: the [D, E] initializer read by the first MatMul.
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    router = next(inits[n.input[1]] for n in model.graph.node
                  if n.op_type == "MatMul" and n.input[1] in inits)
    d, e = router.shape
    rng = np.random.default_rng(7)
    col = router[:, args.expert] / np.linalg.norm(router[:, args.expert])
    x = rng.normal(0, 0.3, (args.batch, args.seq, d)) + 4.0 * col
    x = x.astype(np.float32)
    logits = x.reshape(-1, d) @ router
    first = np.argmax(logits, axis=1)
    share = float(np.mean(first == args.expert))
    os.makedirs(args.out_dir, exist_ok=True)
    name = model.graph.input[0].name
    with open(os.path.join(args.out_dir, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, name).SerializeToString())
    print(f"moe-skewed-input.py: expert {args.expert} is the first choice of "
          f"{share:.0%} of {len(first)} tokens (of {e} experts)")


if __name__ == "__main__":
    main()
