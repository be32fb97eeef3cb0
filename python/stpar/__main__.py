"""python3 -m stpar: inspect plan files without the C++ tools.

  python3 -m stpar summary plan.json          # model, mesh, summary, time
  python3 -m stpar diff a.json b.json [--json]
  python3 -m stpar csv plan.json [-o ops.csv]
"""

import argparse
import json
import sys

from . import PlanError, diff_plans, load_plan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m stpar",
                                description="Inspect stpar plan files "
                                "(docs/plan-format.md).")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="the plan in a few lines")
    s.add_argument("plan")
    d = sub.add_parser("diff", help="what changed from plan A to plan B")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--json", action="store_true", help="JSON, not text")
    c = sub.add_parser("csv", help="the operators as CSV")
    c.add_argument("plan")
    c.add_argument("-o", dest="output", help="file (default: stdout)")
    args = p.parse_args(argv)
    try:
        if args.command == "summary":
            print(load_plan(args.plan).describe())
        elif args.command == "diff":
            diff = diff_plans(load_plan(args.a), load_plan(args.b))
            if args.json:
                print(json.dumps(diff.to_dict(), indent=2))
            else:
                sys.stdout.write(diff.to_text())
        else:
            plan = load_plan(args.plan)
            plan.to_csv(args.output or sys.stdout)
    except (PlanError, OSError) as e:
        print("stpar: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
