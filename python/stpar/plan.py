"""Loading plan.json (docs/plan-format.md) into objects."""

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

FORMAT = "stpar-plan"
SCHEMA_VERSION = 1


class PlanError(Exception):
    """A file that is not an stpar plan, or one this package cannot read."""


@dataclass
class Axis:
    """One mesh axis: its name (``pp``; ``dp``, ``tp``... for an axis with
    one role; ``x0``, ``x1``... otherwise), its size in devices, its role in
    the plan (``dp``, ``sp``, ``tp``, ``ep``, ``temporal``, ``dp+tp``,
    ``repl`` for an axis that splits nothing, ``pp``, ``none`` for an axis
    of size 1) and, for an axis named by its role, the search's name
    (``search_name``, what ``stpar plan --fix`` takes; empty otherwise)."""
    name: str
    size: int
    role: str = ""
    search_name: str = ""


@dataclass
class Mesh:
    axes: List[Axis]
    pipeline_stages: int = 1
    micro_batches: int = 1
    zero_stage: int = 0
    recompute_mode: str = "none"
    interleave: int = 1

    @property
    def devices(self) -> int:
        n = 1
        for a in self.axes:
            n *= a.size
        return n

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)


@dataclass
class Loop:
    """One loop of an operator's iteration space; ``axes`` split it."""
    name: str
    extent: int
    reduction: bool = False
    axes: List[str] = field(default_factory=list)
    experts: bool = False


@dataclass
class Tensor:
    """One operand of an operator and how the partition cuts it:
    ``layout`` reads like ``[b/x0, s, h/x1]`` (dim loop / the axes that
    split it; ``/t`` a dim the temporal primitive cuts into q slices).
    ``tag`` is the table's short name (I, I2, W, O); empty in files written
    before plan.json carried it."""
    name: str
    role: str
    layout: str
    shape: List[int] = field(default_factory=list)
    tag: str = ""


@dataclass
class Operator:
    name: str
    kind: str
    layer_kind: str
    layer: int
    loops: List[Loop]
    temporal: Optional[dict]
    seconds_per_micro_batch: float
    compute_seconds: float
    comm_seconds: float
    memory_bytes: float
    tensors: List[Tensor] = field(default_factory=list)
    ir_op: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def partition(self) -> str:
        """The partition in the words of the plan table: ``b{x0} h{x1}``,
        ``temporal(x0,x1: m=.. n=.. k=..)`` or ``replicated``."""
        words = [l.name + "{" + ",".join(l.axes) + "}"
                 for l in self.loops if l.axes]
        if self.temporal:
            t = self.temporal
            words.append("temporal(%s,%s: m=%s n=%s k=%s)" % (
                t.get("row_axis"), t.get("col_axis"), t.get("m"),
                t.get("n"), t.get("k")))
        return " ".join(words) if words else "replicated"


@dataclass
class Communication:
    """One collective or transfer the plan charges (plan.json
    ``communication``): seconds alone on its links, bytes per device."""
    op: str
    label: str
    phase: str
    kind: str
    axes: List[str]
    bytes: float
    sent_bytes: float
    count: float
    source: str
    what: str
    seconds: Optional[float] = None
    link: str = ""


@dataclass
class Plan:
    path: str
    model: str
    cluster: str
    devices: int
    mesh: Mesh
    operators: List[Operator]
    communication: List[Communication]
    times: Dict[str, object]
    memory: Dict[str, float]
    summary: str
    producer: Dict[str, str]
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def step_seconds(self) -> float:
        return float(self.times.get("step", 0.0))

    @property
    def memory_bytes(self) -> float:
        return float(self.memory.get("total", 0.0))

    def operator(self, name: str) -> Operator:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def sent_bytes_by_operator(self) -> Dict[str, float]:
        """Bytes one device sends per micro-batch (the plan's records; the
        gradient syncs per step), summed per operator."""
        out: Dict[str, float] = {}
        for c in self.communication:
            out[c.op] = out.get(c.op, 0.0) + c.sent_bytes
        return out

    def describe(self) -> str:
        """A few lines for people: model, mesh, summary, time, memory."""
        axes = " ".join("%s=%d%s" % (a.name, a.size,
                                      "" if a.role in ("", "none", a.name) else
                                      " (" + a.role + ")")
                        for a in self.mesh.axes)
        lines = [
            "plan %s: %s on %d devices of %s" % (self.path, self.model,
                                                 self.devices, self.cluster),
            "mesh %s" % axes,
            "summary %s" % self.summary,
            "step time %.3f ms, memory per device %.3f GiB" % (
                self.step_seconds * 1e3, self.memory_bytes / 2**30),
            "%d operators, %d collectives and transfers" % (
                len(self.operators), len(self.communication)),
        ]
        return "\n".join(lines)

    def to_csv(self, out=None) -> str:
        """The operators as CSV (one row each; seconds and bytes). Writes
        to ``out`` (a path or a text file) when given; returns the text."""
        sent = self.sent_bytes_by_operator()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["name", "kind", "layer_kind", "layer", "partition",
                    "seconds_per_micro_batch", "compute_seconds",
                    "comm_seconds", "memory_bytes", "sent_bytes",
                    "layouts"])
        for op in self.operators:
            w.writerow([op.name, op.kind, op.layer_kind, op.layer,
                        op.partition, repr(op.seconds_per_micro_batch),
                        repr(op.compute_seconds), repr(op.comm_seconds),
                        repr(op.memory_bytes), repr(sent.get(op.name, 0.0)),
                        " ".join(t.name + t.layout for t in op.tensors)])
        text = buf.getvalue()
        if isinstance(out, str):
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        elif out is not None:
            out.write(text)
        return text


def _need(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise PlanError("%s: missing '%s'" % (where, key))
    value = obj[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind):
        raise PlanError("%s: '%s' is not %s" % (where, key, kind.__name__))
    return value


def parse_plan(data: dict, path: str = "<plan>") -> Plan:
    """A Plan from the parsed JSON of a plan file; PlanError names the
    first missing or mistyped key."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PlanError("%s: not an stpar plan (format is not '%s')" %
                        (path, FORMAT))
    if data.get("version") != SCHEMA_VERSION:
        raise PlanError("%s: plan schema version %r, this package reads %d" %
                        (path, data.get("version"), SCHEMA_VERSION))
    m = _need(data, "mesh", dict, path)
    axes = [Axis(_need(a, "name", str, path + ": mesh.axes"),
                 _need(a, "size", int, path + ": mesh.axes"),
                 a.get("role", ""), a.get("search_name", ""))
            for a in _need(m, "axes", list, path + ": mesh")]
    mesh = Mesh(axes, m.get("pipeline_stages", 1), m.get("micro_batches", 1),
                m.get("zero_stage", 0), m.get("recompute_mode", "none"),
                m.get("interleave", 1))
    ops = []
    for i, o in enumerate(_need(data, "operators", list, path)):
        where = "%s: operators[%d]" % (path, i)
        spec = _need(o, "spec", dict, where)
        loops = [Loop(_need(l, "name", str, where), _need(l, "extent", int,
                                                          where),
                      bool(l.get("reduction", False)), list(l.get("axes", [])),
                      bool(l.get("experts", False)))
                 for l in _need(spec, "loops", list, where + ".spec")]
        tensors = [Tensor(t.get("name", ""), t.get("role", ""),
                          t.get("layout", ""), list(t.get("shape", [])),
                          t.get("tag", ""))
                   for t in o.get("tensors", [])]
        ops.append(Operator(
            _need(o, "name", str, where), o.get("kind", ""),
            o.get("layer_kind", ""), o.get("layer", -1), loops,
            spec.get("temporal"),
            _need(o, "seconds_per_micro_batch", float, where),
            float(o.get("compute_seconds", 0.0)),
            float(o.get("comm_seconds", 0.0)),
            float(o.get("memory_bytes", 0.0)), tensors, o.get("ir_op", ""),
            o))
    comm = []
    for i, c in enumerate(data.get("communication", [])):
        where = "%s: communication[%d]" % (path, i)
        comm.append(Communication(
            _need(c, "op", str, where), c.get("label", ""),
            _need(c, "phase", str, where), _need(c, "kind", str, where),
            list(c.get("axes", [])), float(c.get("bytes", 0.0)),
            float(c.get("sent_bytes", 0.0)), float(c.get("count", 1.0)),
            c.get("source", ""), c.get("what", ""), c.get("seconds"),
            c.get("link", "")))
    times = _need(data, "times", dict, path)
    _need(times, "step", float, path + ": times")
    memory = _need(data, "memory", dict, path)
    _need(memory, "total", float, path + ": memory")
    summary = data.get("summary") or "pp=%d zero-%d m=%d" % (
        mesh.pipeline_stages, mesh.zero_stage, mesh.micro_batches)
    return Plan(path, data.get("model", ""), data.get("cluster", ""),
                int(data.get("devices", mesh.devices)), mesh, ops, comm,
                times, memory, summary, dict(data.get("producer", {})), data)


def load_plan(path: str) -> Plan:
    """Reads a plan file (``stpar plan -o plan.json``, or ``plan.json`` in
    the output folder of ``stpar compile``). Raises PlanError for a file
    that is not a plan, OSError when it cannot be read."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise PlanError("%s:%d:%d: not JSON: %s" %
                            (path, e.lineno, e.colno, e.msg)) from None
    return parse_plan(data, path)
