#!/usr/bin/env python3
# misplan.py IN OUT OPERATOR - writes a deliberately wrong plan: OPERATOR's
# split moves from its first split loop to its reduction loop (a row split
# whose partial sums the program must all-reduce), while the plan's
# "communication" records still say what the original plan communicates.
import json
import sys

src, dst, name = sys.argv[1:4]
plan = json.load(open(src))
for op in plan["operators"]:
    if op["name"] != name:
        continue
    loops = op["spec"]["loops"]
    split = next(l for l in loops if l["axes"])
    reduction = next(l for l in loops if l["reduction"])
    reduction["axes"], split["axes"] = split["axes"], []
    break
else:
    sys.exit(f"no operator {name}")
json.dump(plan, open(dst, "w"), indent=1)
