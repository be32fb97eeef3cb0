"""Compares two `stpar cost --json` results: tp alone, then with sp=1."""
import json
import sys

tp, sp = (json.load(open(p)) for p in sys.argv[1:3])
comm = (tp["micro_batch"]["communication_s"], sp["micro_batch"]["communication_s"])
# Equal up to the gradient of a broadcast input that sp splits: the
# position embedding added to every sequence, whose gradient is all-reduced
# over dp and, with the sequence split over tp, is tp times smaller.
print("communication equal" if comm[1] <= comm[0] and
      comm[0] - comm[1] <= 1e-3 * comm[0] else f"communication differs: {comm}")
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
