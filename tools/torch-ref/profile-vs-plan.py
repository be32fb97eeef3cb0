#!/usr/bin/python3
# profile-vs-plan.py - per-op times of an emitted program (its STPAR_PROFILE
# lines on stderr) next to the plan's predictions (plan.json).
#
#   profile-vs-plan.py PROFILE.txt plan.json [--top N]
#
# Part of stpar (docs/training.md, "On a GPU"). A profile line reads
#   stpar_program: profile   <ms> ms <count>  <ONNX node>[/grad...] [<phase>]
# Rows are (node, phase): forward, input_grad and weight_grad ops map to the
# plan operator of the same node (gradient ops are named <node>/grad<i>) and
# its phase time (plan.json operators[].phases); loss, grad_sum and
# optimizer ops have no per-operator prediction (the plan's optimizer time
# is one number); collectives and their waits are the phase "comm" (the
# plan's exposed communication is in its step time). The last lines compare the totals with the plan's step.
import argparse
import collections
import json
import re
import sys

LINE = re.compile(r"stpar_program: profile\s+([0-9.]+) ms\s+(\d+)\s+(.*) \[(\w+)\]$")
GRAD = re.compile(r"/grad(\d+|_table)?$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("plan")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    plan = json.load(open(a.plan))
    predicted = collections.defaultdict(float)
    for op in plan.get("operators", []):
        for phase, info in (op.get("phases") or {}).items():
            predicted[(op.get("ir_op", ""), phase)] += info.get("seconds", 0.0)
    measured = collections.defaultdict(float)
    for line in open(a.profile):
        m = LINE.search(line.rstrip())
        if not m:
            continue
        ms, _, label, phase = m.groups()
        if phase == "end":
            continue
        node = GRAD.sub("", label) if phase in ("input_grad",
                                                 "weight_grad") else label
        measured[(node, phase)] += float(ms) * 1e-3
    if not measured:
        sys.exit("profile-vs-plan: no profile lines in " + a.profile +
                 " (run the program with STPAR_PROFILE=1)")
    rows = sorted(measured.items(), key=lambda kv: -kv[1])
    print("%-52s %-12s %11s %11s %7s" % ("operator (ONNX node)", "phase",
                                         "measured ms", "plan ms", "ratio"))
    for (node, phase), seconds in rows[:a.top]:
        p = predicted.get((node, phase))
        ratio = "%7.2f" % (seconds / p) if p else "      -"
        print("%-52s %-12s %11.4f %11s %s" % (
            node[-52:], phase, seconds * 1e3,
            "%11.4f" % (p * 1e3) if p else "          -", ratio))
    if len(rows) > a.top:
        print("... %d more rows" % (len(rows) - a.top))
    by_phase = collections.defaultdict(float)
    for (node, phase), seconds in measured.items():
        by_phase[phase] += seconds
    times = plan.get("times", {})
    phases = times.get("phases_per_micro_batch", {})
    print("by phase (measured ms / plan ms):")
    for phase in ("forward", "input_grad", "weight_grad", "comm", "loss",
                  "grad_sum", "optimizer"):
        p = phases.get(phase)
        if phase == "optimizer":
            p = times.get("optimizer")
        print("  %-12s %11.4f %11s" % (phase, by_phase.get(phase, 0.0) * 1e3,
                                       "%11.4f" % (p * 1e3) if p else "-"))
    total = sum(measured.values())
    step = times.get("step")
    print("step: measured %.4f ms, plan %.4f ms%s" % (
        total * 1e3, (step or 0) * 1e3,
        " (ratio %.2f)" % (total / step) if step else ""))


if __name__ == "__main__":
    main()
