"""stpar's partition plans in Python.

Loads the ``plan.json`` that ``stpar plan -o`` and ``stpar compile`` write
(docs/plan-format.md) into plain objects, prints its summary, diffs two
plans and exports the operators as CSV. Standard library only: runs on
Debian's ``/usr/bin/python3`` without pandas or numpy.

    import stpar
    plan = stpar.load_plan("out/plan.json")
    print(plan.summary)                 # "pp=1 dp=2 tp=4 zero-2 m=1"
    for op in plan.operators:
        print(op.name, op.partition, op.seconds_per_micro_batch)
    print(stpar.diff_plans(plan, stpar.load_plan("b.json")).to_text())

Units as in the file: seconds and bytes (per device).
"""

from .plan import (Axis, Communication, Loop, Mesh, Operator, Plan,
                   PlanError, Tensor, load_plan, parse_plan)
from .diff import PlanDiff, diff_plans

__all__ = ["Axis", "Communication", "Loop", "Mesh", "Operator", "Plan",
           "PlanDiff", "PlanError", "Tensor", "diff_plans", "load_plan",
           "parse_plan"]
__version__ = "0.1.0"
