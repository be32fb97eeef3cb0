#!/usr/bin/python3
"""Compares `stpar cost --json` of the IR route (MODEL.onnx) with the GPT
builder's (--model gpt:...) for the same GPT configuration.

usage: compare-routes.py IR.json GPT.json SEQ

Model and hardware FLOPs must agree within 1% (the IR route counts the
graph's elementwise ops as exported -- bias adds, the five-op Erf GeLU, the
scale and mask -- where the builder counts fused ones, and it has no loss
op; matmul FLOPs are identical). Devices and micro-batches must be equal.
Parameters must be equal, or exceed the builder's by exactly SEQ*SEQ: the
importer marks the zoo's causal-mask buffer trainable (it keys `trainable`
on float initializers of more than one element, not on the zoo's
doc_string "buffer"). Prints the figures and exits 1 on a mismatch.
"""
import json
import sys

ir = json.load(open(sys.argv[1]))
gpt = json.load(open(sys.argv[2]))
seq = int(sys.argv[3])
ok = True
for key in ("model_flops", "hardware_flops"):
    rel = ir[key] / gpt[key] - 1
    print(f"{key}: ir {ir[key]:.6e} gpt {gpt[key]:.6e} rel {rel:+.4%}")
    if abs(rel) > 0.01:
        print(f"error: {key} differs by more than 1%")
        ok = False
for key in ("devices", "micro_batches", "pipeline_stages"):
    print(f"{key}: ir {ir[key]} gpt {gpt[key]}")
    if ir[key] != gpt[key]:
        print(f"error: {key} differs")
        ok = False
extra = ir["parameters"] - gpt["parameters"]
print(f"parameters: ir {ir['parameters']:.0f} gpt {gpt['parameters']:.0f} "
      f"extra {extra:.0f}")
if extra not in (0, seq * seq):
    print("error: parameter counts differ by more than the causal mask")
    ok = False
print("routes agree" if ok else "routes disagree")
sys.exit(0 if ok else 1)
