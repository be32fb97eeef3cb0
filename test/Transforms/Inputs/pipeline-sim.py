"""Checks -stp-pipeline-schedule's slot lists against an independent
simulation (this file shares no code with cost/PipelineSchedule.cpp).

For every (kind, p, m, v) (one stpar-opt run per kind over one module per
shape, the plan's default kind for 1f1b and interleaved) it reads
`stp.pipeline_schedule` and simulates the lists: a slot starts when its
rank has finished the slot before it and its inputs exist (F of virtual stage s after F of s - 1, B of
s after B of s + 1 and F of s; virtual stage = chunk * p + rank). It checks
that every rank runs every slot once, that nothing deadlocks, that each
rank idles exactly bubble_slots x (F + B) (for two F:B cost ratios), and
that each rank's most micro-batches in flight equal in_flight. Prints one
line per kind with the number of cases.

`pipeline-sim.py matrix STPAR_OPT` runs that matrix; `pipeline-sim.py plan
PLAN.json SCHEDULED.mlir` checks that a plan's predicted bubble (plan.json's
step.bubble_s of step.pipeline_s) is the scheduled module's bubble_slots /
(m + bubble_slots)."""
import re
import subprocess
import sys


def read_schedules(stpar_opt, kind, shapes):
    """Runs -stp-pipeline-schedule once over one module per (p, m, v) (the
    plan's mesh entry; `kind` as the pass option, or None for the plan's
    default) and returns, per shape, (ranks, bubble_slots, in_flight)."""
    modules = [
        "module attributes {stp.plan = {mesh = {pipeline_stages = %d : i64, "
        "micro_batches = %d : i64, interleave = %d : i64}}} {}" % shape
        for shape in shapes]
    option = "--stp-pipeline-schedule"
    if kind:
        option += "=kind=" + kind
    out = subprocess.run([stpar_opt, "--split-input-file", option],
                         input="\n// -----\n".join(modules),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    texts = [t for t in out.stdout.split("// -----") if "module" in t]
    assert len(texts) == len(shapes), (len(texts), len(shapes))
    result = []
    for text in texts:
        ranks_text = re.search(r"ranks = \[(.*?)\]\]", text).group(1) + "]"
        ranks = [re.findall(r'"([^"]+)"', r)
                 for r in re.findall(r"\[([^\[\]]*)\]", ranks_text)]
        bubble = float(re.search(r"bubble_slots = ([0-9.e+-]+)", text).group(1))
        flight = [float(x) for x in re.findall(r"([0-9.e+-]+)", re.search(
            r"in_flight = \[([^\]]*)\]", text).group(1))]
        got_kind = re.search(r'kind = "([a-z0-9]+)"', text).group(1)
        result.append((ranks, bubble, flight, got_kind))
    return result


def parse_slot(slot):
    phase, rest = slot[0], slot[1:]
    mb, _, chunk = rest.partition(".")
    return phase, int(mb), int(chunk or 0)


def simulate(ranks, p, m, v, tf, tb):
    stages = p * v
    finish = {}
    nxt = [0] * p
    free = [0.0] * p
    left = sum(len(r) for r in ranks)
    while left:
        moved = False
        for r in range(p):
            while nxt[r] < len(ranks[r]):
                phase, mb, chunk = parse_slot(ranks[r][nxt[r]])
                s = chunk * p + r
                deps = [("F", mb, s - 1)] if phase == "F" and s > 0 else []
                if phase == "B":
                    deps = [("F", mb, s)] + (
                        [("B", mb, s + 1)] if s + 1 < stages else [])
                if any(d not in finish for d in deps):
                    break
                start = max([free[r]] + [finish[d] for d in deps])
                free[r] = finish[(phase, mb, s)] = start + (
                    tf if phase == "F" else tb) / v
                nxt[r] += 1
                left -= 1
                moved = True
        if not moved:
            raise AssertionError("deadlock at %s" % [
                ranks[r][nxt[r]] for r in range(p) if nxt[r] < len(ranks[r])])
    makespan = max(free)
    idle = [makespan - m * (tf + tb) for _ in range(p)]
    flight = []
    for r in range(p):
        held = peak = 0
        for slot in ranks[r]:
            held += 1 if slot[0] == "F" else -1
            peak = max(peak, held)
        flight.append(peak / v)
    return idle, flight


def check_plan(plan_path, mlir_path):
    import json
    step = json.load(open(plan_path))["step"]
    text = open(mlir_path).read()
    b = float(re.search(r"bubble_slots = ([0-9.e+-]+)", text).group(1))
    m = int(re.search(r"micro_batches = ([0-9]+) : i64, ranks", text).group(1))
    kind = re.search(r'kind = "([a-z0-9]+)"', text).group(1)
    got = step["bubble_s"] / step["pipeline_s"]
    assert abs(got - b / (m + b)) < 1e-9, (plan_path, got, b, m)
    print("%s m=%d bubble_slots=%g plan bubble share %.4f" % (kind, m, b, got))
    # Each stage's memory: its micro-batches in flight are the schedule's.
    stages = json.load(open(plan_path))["memory"]["stages"]
    flight = [float(x) for x in re.findall(r"([0-9.e+-]+)", re.search(
        r"in_flight = \[([^\]]*)\]", text).group(1))]
    assert [s["in_flight"] for s in stages] == flight, (stages, flight)
    print("%s stage in_flight %s; activations / stage 0's: %s" % (
        kind, " ".join("%g" % f for f in flight),
        " ".join("%.4f" % (s["activations"] / stages[0]["activations"])
                 for s in stages)))


def main():
    if sys.argv[1] == "plan":
        return check_plan(sys.argv[2], sys.argv[3])
    stpar_opt = sys.argv[2]
    for kind, vs in (("gpipe", [1]), ("1f1b", [1]), ("interleaved", [2, 3, 4])):
        shapes, refused = [], 0
        for p in (1, 2, 3, 4, 8):
            for m in (1, 2, 3, 4, 8, 16):
                for v in vs:
                    # Interleaving needs p >= 2 and m a multiple of p (the
                    # pass's refusals are tested in pipeline-schedule.mlir).
                    if kind == "interleaved" and (p < 2 or m % p):
                        refused += 1
                        continue
                    shapes.append((p, m, v))
        # 1f1b and interleaved are the plan's default kinds (v = 1 or > 1).
        runs = read_schedules(stpar_opt, kind if kind == "gpipe" else None,
                              shapes)
        for (p, m, v), (ranks, bubble, flight, got_kind) in zip(shapes, runs):
            assert got_kind == kind, (p, m, v, got_kind)
            assert len(ranks) == p
            want = sorted("%s%d%s" % (ph, mb, ".%d" % c if v > 1 else "")
                          for ph in "FB" for mb in range(m) for c in range(v))
            for r in ranks:
                assert sorted(r) == want, (kind, p, m, v, r)
            for tf, tb in ((1.0, 2.0), (1.0, 1.0)):
                idle, held = simulate(ranks, p, m, v, tf, tb)
                for r in range(p):
                    assert abs(idle[r] - bubble * (tf + tb)) < 1e-9, (
                        kind, p, m, v, tf, tb, r, idle[r], bubble)
                    assert abs(held[r] - flight[r]) < 1e-9, (
                        kind, p, m, v, r, held[r], flight[r])
        print("%s: %d schedules match the simulation (%d shapes left out)" % (
            kind, len(shapes), refused))


main()
