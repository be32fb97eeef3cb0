"""Reads a plan.json and states, per linear, how Megatron's tensor-parallel
axis splits it.

usage: megatron-layout.py PLAN.json --column REGEX --row REGEX

Prints one line per matched linear ("column NAME" / "row NAME") and a
summary; exits 1 when a linear matched by --column is not split on an output
(non-reduction) loop over tp, one matched by --row not on its reduction
loop, or a norm is split over tp (Megatron never splits a norm).
"""
import argparse
import json
import re
import sys


def tp_loops(op):
    return [l for l in op["spec"]["loops"] if "tp" in l["axes"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("--column", required=True)
    ap.add_argument("--row", required=True)
    a = ap.parse_args()
    plan = json.load(open(a.plan))
    errors, counts = [], {"column": 0, "row": 0, "norm": 0}
    seen = set()
    for op in plan["operators"]:
        name = op["ir_op"]
        if name in seen:
            continue  # repeated layers list one operator per layer copy
        seen.add(name)
        loops = tp_loops(op)
        if op["kind"] == "norm":
            counts["norm"] += 1
            if loops:
                errors.append(f"norm {name} split over tp")
            continue
        if op["kind"] != "matmul":
            continue
        for want, pattern in (("column", a.column), ("row", a.row)):
            if not re.search(pattern, name):
                continue
            got = None
            if len(loops) == 1:
                got = "row" if loops[0]["reduction"] else "column"
            if got != want:
                errors.append(f"{name}: expected {want}-parallel, got "
                              f"{got or 'no tp split'}")
            else:
                counts[want] += 1
                print(f"{want} {name}")
    print(f"column-parallel {counts['column']} row-parallel {counts['row']} "
          f"norms unsplit {counts['norm'] - sum('norm' in e for e in errors)}")
    for e in errors:
        print("error:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
