#!/usr/bin/python3
"""Counts the collectives of a partitioned program against the plan's
communication records (test/Compile/plan-collectives.test).

usage: count-collectives.py OUTDIR

Every collective op of OUTDIR/partitioned.mlir (shard.all_reduce,
all_gather, all_to_all, reduce_scatter, shift) is classified by the
operator and phase its stp.plan_step names: a gradient op `<node>/grad...`
counts as `<node>`, input_grad and weight_grad as `backward`. Each one must
be listed in OUTDIR/plan.json's `communication` (a record of that operator
and phase class with bytes to send), be a gradient sync (`grad_sum`, or a
`gradient bucket`) while the plan lists gradient syncs, or be one of the
steps the plan does not charge (docs/plan-format.md, "Plan check": the
loss, the optimizer, the gathers of the results). Prints the counts per
class and exits 1 naming the first collective the plan does not list.
"""

import collections
import json
import os
import re
import sys

UNCHARGED = ("loss", "optimizer", "result", "return")


def phase_class(phase):
    return "backward" if phase in ("input_grad", "weight_grad") else phase


def main():
    out = sys.argv[1]
    program = open(os.path.join(out, "partitioned.mlir")).read()
    plan = json.load(open(os.path.join(out, "plan.json")))
    listed = collections.Counter()
    for c in plan["communication"]:
        if c["sent_bytes"] > 0:
            listed[(c["label"], phase_class(c["phase"]))] += 1
    syncs = sum(n for (label, phase), n in listed.items()
                if phase == "grad_sum")
    counts = collections.Counter()
    for kind, step in re.findall(
            r'shard\.(all_reduce|all_gather|all_to_all|reduce_scatter|shift)'
            r'\b[^\n]*?stp\.plan_step = "([^"]*)"', program):
        head = step.split(": ", 1)[0]
        label, phase = head.rsplit(" ", 1) if " " in head else (head, "")
        label = re.sub(r"/grad[^/]*$", "", label)
        if label.startswith("gradient bucket") or phase == "grad_sum":
            if syncs == 0:
                print(f"UNLISTED gradient sync: {step}")
                return 1
            counts["gradient sync"] += 1
        elif label.split(":")[0] in UNCHARGED or phase in UNCHARGED:
            counts["not charged (loss, optimizer, results)"] += 1
        elif listed[(label, phase_class(phase))] > 0:
            counts[phase_class(phase)] += 1
        else:
            print(f"UNLISTED {kind}: {step}")
            return 1
    unlabelled = len(re.findall(
        r'shard\.(all_reduce|all_gather|all_to_all|reduce_scatter|shift)\b',
        program)) - sum(counts.values())
    if unlabelled:
        print(f"UNLISTED: {unlabelled} collective(s) without stp.plan_step")
        return 1
    plan_counts = collections.Counter()
    for (label, phase), n in listed.items():
        plan_counts[phase] += n
    print("program collectives: " + ", ".join(
        f"{k} {v}" for k, v in sorted(counts.items())))
    print("plan records with bytes to send: " + ", ".join(
        f"{k} {v}" for k, v in sorted(plan_counts.items())))
    print(f"all {sum(counts.values())} collectives of the program are listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
