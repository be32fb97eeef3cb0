"""Compares two `stpar cost --json` results: tp alone, then with sp=1."""
import json
import sys

onnx = "--onnx" in sys.argv
tp, sp = (json.load(open(p)) for p in
          [a for a in sys.argv[1:] if a != "--onnx"][:2])
comm = (tp["micro_batch"]["communication_s"], sp["micro_batch"]["communication_s"])
# Equal up to the gradient of a broadcast input that sp splits: the
# position embedding added to every sequence, whose gradient is all-reduced
# over dp and, with the sequence split over tp, is tp times smaller.
# On the ONNX route (--onnx) the position embedding is read with constant
# indices, so it is not planned and runs replicated: with the sequence
# split over tp its gradient is gathered over tp for it, one all-gather of
# s x h elements (3 ring steps of 5 us on dgx-a100's NVLink plus about
# 0.2 us of bytes) on top of tp's.
extra = comm[1] - comm[0]
if onnx:
    print("communication tp's plus one all-gather"
          if 1.4e-5 <= extra <= 1.6e-5 else f"communication differs: {comm}")
else:
    print("communication equal" if comm[1] <= comm[0] and
          -extra <= 1e-3 * comm[0] else f"communication differs: {comm}")
act = (tp["peak_memory"]["activations_bytes"], sp["peak_memory"]["activations_bytes"])
print(f"activations {act[1] / act[0]:.3f} of tp's" if act[1] < act[0]
      else f"activations not smaller: {act}")
kernels = [sum(r["micro_batch"][k] for k in
               ("forward_s", "backward_input_s", "backward_weight_s"))
           for r in (tp, sp)]
print("kernels faster" if kernels[1] < kernels[0]
      else f"kernels not faster: {kernels}")
# The norms' weights are replicated over tp but see only their sequence
# slice: their gradients are summed over tp too.
print("gradient sync larger" if sp["grad_sync_s"] > tp["grad_sync_s"]
      else f"gradient sync not larger: {tp['grad_sync_s']} -> {sp['grad_sync_s']}")
