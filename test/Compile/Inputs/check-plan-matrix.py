#!/usr/bin/env python3
# check-plan-matrix.py - the plan check (stpar compile --check-plan) over
# the verify matrix's cases (test/Verify/Inputs/verify-matrix.py: models x
# strategies x rank counts), without building or running the programs.
#
#   check-plan-matrix.py --stpar BIN --work DIR [--shared DIR] [--loss]
#                        [--ranks 2,2x2]
#
# Each case: `stpar plan --strategy S [--mesh AxB | --devices N] -o
# plan.json`, then `stpar compile --plan plan.json --check-plan --emit=plan`
# (with --loss: a training step with verify-matrix.py's loss of the model).
# One line per case:
#   MODEL STRATEGY RANKS: AGREE N of N | DIFFERS <first difference> |
#   REJECTED as expected | ERROR <message>
# Exit 0 when every case agrees or is rejected as expected.
import argparse
import importlib.util
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "verify_matrix",
    os.path.join(HERE, "..", "..", "Verify", "Inputs", "verify-matrix.py"))
matrix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matrix)


def run_case(args, model, strategy, ranks):
    path, dims = matrix.MODELS[model]
    model_path = os.path.join(args.shared, path)
    name = f"{model}-{strategy}-{ranks}"
    plan_file = os.path.join(args.work, name + ".json")
    plan = [args.stpar, "plan", model_path, "--cluster", args.cluster,
            "--strategy", strategy, "-o", plan_file] + dims
    plan += ["--mesh", ranks] if "x" in ranks else ["--devices", ranks]
    p = subprocess.run(plan, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    line = f"{model} {strategy} {ranks}: "
    expected = matrix.EXPECTED_REJECTIONS.get((model, strategy, ranks))
    if expected:
        if p.returncode == 1 and expected in p.stderr:
            return True, line + "REJECTED as expected"
        return False, line + "ERROR -- expected a rejection, got: " + \
            p.stderr.strip()[-200:]
    if p.returncode != 0:
        return False, line + "ERROR -- stpar plan: " + p.stderr.strip()[-200:]
    cmd = [args.stpar, "compile", model_path, "--cluster", args.cluster,
           "--plan", plan_file, "--check-plan", "--emit=plan",
           "-o", os.path.join(args.work, name)] + dims
    if args.loss:
        cmd += ["--loss", matrix.LOSSES[model]]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    summary = re.search(r"plan check: (\d+) of (\d+) \(operator, phase\) "
                        r"pairs agree", p.stdout + p.stderr)
    if p.returncode == 0 and summary:
        return True, line + f"AGREE {summary.group(1)} of {summary.group(2)}"
    first = re.search(r"plan check: .*", p.stderr)
    return False, line + "DIFFERS -- " + (first.group(0) if first
                                          else p.stderr.strip()[-300:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stpar", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--shared", default=matrix.SHARED)
    parser.add_argument("--cluster", default="dgx-a100-80g-1")
    parser.add_argument("--loss", action="store_true",
                        help="check the training step (F and B) instead")
    parser.add_argument("--ranks", default=",".join(matrix.RANKS),
                        help="the rank counts / mesh shapes to check "
                             "(default: all of the matrix's)")
    args = parser.parse_args()
    ranks_list = args.ranks.split(",")
    unknown = [r for r in ranks_list if r not in matrix.RANKS]
    if unknown:
        parser.error("unknown --ranks %s (the matrix has %s)" %
                     (",".join(unknown), ",".join(matrix.RANKS)))
    os.makedirs(args.work, exist_ok=True)
    ok = True
    for model in matrix.MODELS:
        for ranks in ranks_list:
            for strategy in matrix.STRATEGIES:
                passed, line = run_case(args, model, strategy, ranks)
                print(line, flush=True)
                ok = ok and passed
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
