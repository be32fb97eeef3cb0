#!/usr/bin/env python3
# moe-plan.py - force an expert-parallel layout onto the MoE layers of a plan
# file, as a user forces a plan: the spec of every stp.moe operator (loops
# tokens, h, e, f; docs/plan-format.md) gets the given mesh axes.
#
#   moe-plan.py IN.json OUT.json [--tokens x0,x1 --experts x1 [--ffn x1]]
#               [--schedule-group G] [--all-to-all flat|hierarchical]
#               [--shadow E0,E1]
#
# --schedule-group sets the smart schedule's group size the program follows
# (operators[].moe.schedule_group_size; FasterMoE Sec. 4.2), --all-to-all
# the exchange (operators[].moe.all_to_all; hierarchical: BaGuaLu's two
# levels where the expert group spans nodes), --shadow the experts
# FasterMoE's shadowing broadcasts (operators[].moe.shadowed_experts).
#
# The plan's other operators keep their specs; its predicted communication
# is the input plan's (stpar verify's plan check reports the difference).
import argparse
import json
import sys


def axes(text):
    return [a for a in text.split(",") if a]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--tokens", type=axes)
    ap.add_argument("--experts", type=axes, default=[])
    ap.add_argument("--ffn", type=axes, default=[])
    ap.add_argument("--schedule-group", type=int)
    ap.add_argument("--all-to-all", choices=["flat", "hierarchical"])
    ap.add_argument("--shadow", type=lambda t: [int(x) for x in axes(t)])
    args = ap.parse_args()
    plan = json.load(open(args.input))
    layers = 0
    for op in plan["operators"]:
        loops = op["spec"]["loops"]
        if not any(l.get("experts") for l in loops):
            continue
        layers += 1
        if args.schedule_group is not None:
            op.setdefault("moe", {})["schedule_group_size"] = args.schedule_group
        if args.all_to_all is not None:
            op.setdefault("moe", {})["all_to_all"] = args.all_to_all
        if args.shadow is not None:
            op.setdefault("moe", {})["shadowed_experts"] = args.shadow
        if args.tokens is None:
            continue
        loops[0]["axes"] = args.tokens
        loops[2]["axes"] = args.experts
        loops[3]["axes"] = args.ffn
    # The router matmul (the operator after each MoE one) has no experts
    # loop: it follows its layer's token split.
    ops = plan["operators"]
    for i, op in enumerate(ops):
        if op["name"].endswith(".router") and args.tokens is not None:
            op["spec"]["loops"][0]["axes"] = args.tokens
    if not layers:
        sys.exit("moe-plan.py: the plan has no MoE operator")
    json.dump(plan, open(args.output, "w"), indent=2)
    print(f"moe-plan.py: {layers} MoE layer(s): tokens {args.tokens}, "
          f"experts {args.experts}, ffn {args.ffn}, schedule group "
          f"{args.schedule_group}, shadowed experts {args.shadow}")


if __name__ == "__main__":
    main()
