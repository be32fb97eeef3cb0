"""Diffing two plans: per-operator partition changes, changed collectives
and the time and memory deltas (the same content as `stpar plan diff`)."""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from .plan import Plan


def _mib(x: float) -> str:
    return "%.3f MiB" % (x / 2**20)


@dataclass
class PlanDiff:
    a: str
    b: str
    settings: List[Tuple[str, str, str]]
    step_seconds: Tuple[float, float]
    memory_bytes: Tuple[float, float]
    changed: List[Tuple[str, str, str, float]]
    only_a: List[str]
    only_b: List[str]
    unchanged: int
    communication: List[Tuple[str, str, str, str, float, float]]
    sent_bytes: Tuple[float, float]
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return (not self.settings and not self.changed and not self.only_a
                and not self.only_b and not self.communication and
                self.step_seconds[0] == self.step_seconds[1] and
                self.memory_bytes[0] == self.memory_bytes[1])

    def to_dict(self) -> dict:
        """The diff as `stpar plan diff --json` writes it."""
        def pair(p):
            return {"a": p[0], "b": p[1], "delta": p[1] - p[0]}
        return {
            "format": "stpar-plan-diff", "version": 1, "a": self.a,
            "b": self.b,
            "settings": [{"key": k, "a": x, "b": y}
                         for k, x, y in self.settings],
            "step_seconds": pair(self.step_seconds),
            "memory_bytes": pair(self.memory_bytes),
            "operators": {
                "changed": [{"name": n, "a": x, "b": y, "seconds_delta": d}
                            for n, x, y, d in self.changed],
                "only_a": self.only_a, "only_b": self.only_b,
                "unchanged": self.unchanged},
            "communication": {
                "changed": [{"op": o, "phase": p, "kind": k, "axes": ax,
                             "a_sent_bytes": x, "b_sent_bytes": y}
                            for o, p, k, ax, x, y in self.communication],
                "sent_bytes": pair(self.sent_bytes)},
        }

    def to_text(self) -> str:
        ta, tb = self.step_seconds
        ma, mb = self.memory_bytes
        lines = ["plan diff %s -> %s" % (self.a, self.b)]
        for k, x, y in self.settings:
            lines.append("  %s: %s -> %s" % (k, x, y))
        lines.append("  step time: %.3f ms -> %.3f ms (%+.3f ms, %.3fx)" % (
            ta * 1e3, tb * 1e3, (tb - ta) * 1e3, tb / ta if ta else 0.0))
        lines.append("  memory per device: %.3f GiB -> %.3f GiB (%+.3f GiB)"
                     % (ma / 2**30, mb / 2**30, (mb - ma) / 2**30))
        lines.append("  operators: %d repartitioned, %d only in A, %d only "
                     "in B, %d unchanged" % (len(self.changed),
                                             len(self.only_a),
                                             len(self.only_b),
                                             self.unchanged))
        for n, x, y, d in self.changed:
            lines.append("    %s: %s -> %s (%+.4f ms per micro-batch)" %
                         (n, x, y, d * 1e3))
        for n in self.only_a:
            lines.append("    only in A: %s" % n)
        for n in self.only_b:
            lines.append("    only in B: %s" % n)
        sa, sb = self.sent_bytes
        lines.append("  communication: %s -> %s sent per device; %d "
                     "collectives changed" % (_mib(sa), _mib(sb),
                                              len(self.communication)))
        for o, p, k, ax, x, y in self.communication:
            lines.append("    %s %s %s over %s: %s -> %s" %
                         (o, p, k, ax or "-", _mib(x), _mib(y)))
        return "\n".join(lines) + "\n"


def _comm_groups(plan: Plan) -> Dict[Tuple[str, str, str, str], float]:
    groups: Dict[Tuple[str, str, str, str], float] = {}
    for c in plan.communication:
        key = (c.op, c.phase, c.kind, ",".join(c.axes))
        groups[key] = groups.get(key, 0.0) + c.sent_bytes
    return groups


def diff_plans(a: Plan, b: Plan) -> PlanDiff:
    """What changed from plan `a` to plan `b`. Operators are matched by
    name; collectives by (operator, phase, kind, mesh axes), their sent
    bytes summed."""
    settings = []
    for key, x, y in [
            ("model", a.model, b.model), ("cluster", a.cluster, b.cluster),
            ("devices", str(a.devices), str(b.devices)),
            ("mesh", " ".join("%s=%d" % (ax.name, ax.size)
                              for ax in a.mesh.axes),
             " ".join("%s=%d" % (ax.name, ax.size) for ax in b.mesh.axes)),
            ("summary", a.summary, b.summary)]:
        if x != y:
            settings.append((key, x, y))
    bops = {op.name: op for op in b.operators}
    aops = {op.name for op in a.operators}
    changed, unchanged = [], 0
    for op in a.operators:
        other = bops.get(op.name)
        if other is None:
            continue
        if op.partition != other.partition:
            changed.append((op.name, op.partition, other.partition,
                            other.seconds_per_micro_batch -
                            op.seconds_per_micro_batch))
        else:
            unchanged += 1
    only_a = [op.name for op in a.operators if op.name not in bops]
    only_b = [op.name for op in b.operators if op.name not in aops]
    ga, gb = _comm_groups(a), _comm_groups(b)
    comm = []
    for key in list(ga) + [k for k in gb if k not in ga]:
        x, y = ga.get(key, 0.0), gb.get(key, 0.0)
        if x != y:
            comm.append(key + (x, y))
    return PlanDiff(a.path, b.path, settings,
                    (a.step_seconds, b.step_seconds),
                    (a.memory_bytes, b.memory_bytes), changed, only_a, only_b,
                    unchanged, comm,
                    (sum(ga.values()), sum(gb.values())))
