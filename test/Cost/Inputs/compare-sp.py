"""Compares two `stpar cost --json` results: tp alone, then with sp=1."""
import json
import sys

tp, sp = (json.load(open(p)) for p in sys.argv[1:3])
comm = (tp["micro_batch"]["communication_s"], sp["micro_batch"]["communication_s"])
print("communication " + ("equal" if abs(comm[0] - comm[1]) <= 1e-12 * max(comm)
                          else f"differs: {comm}"))
act = (tp["peak_memory"]["activations_bytes"], sp["peak_memory"]["activations_bytes"])
print(f"activations {act[1] / act[0]:.3f} of tp's" if act[1] < act[0]
      else f"activations not smaller: {act}")
print("step faster" if sp["step_s"] < tp["step_s"]
      else f"step not faster: {tp['step_s']} -> {sp['step_s']}")
