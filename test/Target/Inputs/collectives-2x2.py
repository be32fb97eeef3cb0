#!/usr/bin/env python3
"""Writes the inputs of collectives-2x2.mlir to DIR/in and its expected
outputs to DIR/expected (known answers computed with numpy)."""
import os
import sys

import numpy as np

d = sys.argv[1]
os.makedirs(os.path.join(d, "in"), exist_ok=True)
os.makedirs(os.path.join(d, "expected"), exist_ok=True)
rng = np.random.default_rng(7)
x = rng.standard_normal((4, 8)).astype(np.float32)
i = rng.standard_normal((4, 4)).astype(np.float32)
w = rng.standard_normal((4, 4)).astype(np.float32)
for n, a in enumerate([x, i, w]):
    a.tofile(os.path.join(d, "in", "input_%d.bin" % n))
blocks = [x[r * 2:r * 2 + 2, c * 4:c * 4 + 4] for r in range(2) for c in range(2)]
shifted = np.concatenate([x[:, 4:], x[:, :4]], axis=1)
outs = [x, sum(blocks), 2 * x, x, x, shifted, x, i @ w]
for n, a in enumerate(outs):
    a.astype(np.float32).tofile(os.path.join(d, "expected", "output_%d.bin" % n))
