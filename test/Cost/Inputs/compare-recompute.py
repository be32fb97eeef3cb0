"""Compares three `stpar cost --json` results of one configuration:
recompute=none, selective, full (in that order)."""
import json
import sys

none, sel, full = (json.load(open(p)) for p in sys.argv[1:4])
assert [r["recompute"] for r in (none, sel, full)] == ["none", "selective", "full"]


def act(r):
    return r["peak_memory"]["activations_bytes"]


def rec(r):
    return r["micro_batch"]["recompute_s"]


print("activations none > selective > full" if act(none) > act(sel) > act(full)
      else f"activations not ordered: {act(none)} {act(sel)} {act(full)}")
print("recompute time none < selective < full" if 0 == rec(none) < rec(sel) < rec(full)
      else f"recompute time not ordered: {rec(none)} {rec(sel)} {rec(full)}")
print("step none < selective < full" if none["step_s"] < sel["step_s"] < full["step_s"]
      else f"step not ordered: {none['step_s']} {sel['step_s']} {full['step_s']}")
