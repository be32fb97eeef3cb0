"""Numerical check of -stp-partition: runs a planned module (unpartitioned,
one device) and its partitioned SPMD program (all devices of the grid in
lock step, collectives simulated with the docs/spmd-ir.md semantics) with
numpy on the same random inputs, and compares every result on every rank.

usage: spmd-sim.py GLOBAL.mlir PARTITIONED.mlir [INT_HIGH] [--bitwise]
       (both in generic form: stpar-opt --mlir-print-op-generic; several
       modules separated by "// -----" lines, as -split-input-file prints
       them, are compared pairwise; integer inputs are uniform in
       [0, INT_HIGH), default 2, so that they index every embedding table;
       --bitwise also checks that every rank's results are bit-identical)
Prints "ok: N results match on P ranks" or the first mismatch (exit 1).
Covers the ops the importer, -stp-normalize and -stp-partition produce on
the tests and shared models; an unknown op is an error.
"""
import itertools
import math
import re
import sys

import numpy as np

SENTINEL = -9223372036854775808


# --------------------------------------------------------------------------
# Parsing (generic op form, one op per line, regions as "({" ... "})")
# --------------------------------------------------------------------------

class Op:
    def __init__(self):
        self.results, self.name, self.operands = [], "", []
        self.text, self.regions, self.types = "", [], ""


def split_top(text, sep=","):
    out, depth, cur, quote = [], 0, "", False
    for ch in text:
        if ch == '"':
            quote = not quote
        if not quote:
            if ch in "([{<":
                depth += 1
            elif ch in ")]}>":
                depth -= 1
        if ch == sep and depth == 0 and not quote:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [s.strip() for s in out]


OP_RE = re.compile(r'^\s*(?:(%[\w#:]+(?:, %[\w#:]+)*) = )?"([\w.]+)"\((.*?)\)(.*)$')


def parse_results(text):
    if not text:
        return []
    out = []
    for r in text.split(", "):
        if ":" in r:
            name, n = r.split(":")
            out += [f"{name}#{i}" for i in range(int(n))]
        else:
            out.append(r)
    return out


def parse_ops(lines, i):
    ops = []
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s.startswith("}"):
            return ops, i
        m = OP_RE.match(line)
        if not m:
            i += 1
            continue
        op = Op()
        op.results = parse_results(m.group(1))
        op.name = m.group(2)
        op.operands = [o for o in split_top(m.group(3))]
        rest = m.group(4)
        i += 1
        if rest.rstrip().endswith("({"):
            op.text = rest
            while True:
                args = []
                if lines[i].strip().startswith("^"):
                    args = re.findall(r"(%[\w]+):", lines[i])
                    i += 1
                body, i = parse_ops(lines, i)
                op.regions.append((args, body))
                s = lines[i].strip()
                if s.startswith("}, {"):
                    i += 1
                    continue
                tail = s[2:]
                op.text += tail
                i += 1
                break
        else:
            op.text = rest
        idx = op.text.rfind(" : ")
        op.types = op.text[idx + 3:] if idx >= 0 else ""
        ops.append(op)
    return ops, i


def parse_module(text):
    aliases = dict(re.findall(r"^(#\w+) = (affine_map<.*>)$", text, re.M))
    for name in sorted(aliases, key=len, reverse=True):
        text = re.sub(re.escape(name) + r"\b", aliases[name], text)
    lines = text.split("\n")
    ops, _ = parse_ops(lines, 0)
    module = ops[0]
    body = module.regions[0][1]
    grid = None
    func = None
    for op in body:
        if op.name == "shard.grid":
            grid = [int(x) for x in re.search(r"shape = array<i64: ([\d, ]+)>",
                                              op.text).group(1).split(", ")]
        if op.name == "func.func":
            func = op
    return grid, func


def result_types(op):
    rhs = op.types.split("->")[-1].strip()
    if rhs.startswith("("):
        rhs = rhs[1:-1]
    return split_top(rhs)


def tensor_shape(t):
    m = re.match(r"tensor<(.*)>", t)
    if not m:
        return None
    dims = m.group(1).split("x")[:-1]
    return [int(d) for d in dims]


def elem_dtype(t):
    m = re.match(r"tensor<(.*)>", t)
    e = m.group(1).split("x")[-1] if m else t
    if e.startswith("f"):
        return np.float64
    if e == "i1":
        return np.bool_
    return np.int64


def attr(op, name):
    m = re.search(r"\b" + name + r" = ([^,}>]+(?:<[^>]*>)?)", op.text)
    return m.group(1) if m else None


def int_attr(op, name):
    return int(attr(op, name).split(":")[0].strip())


def i64_array(op, name):
    m = re.search(name + r" = array<i\d+(?:: ([-\d, ]*))?>", op.text)
    if not m or not m.group(1):
        return []
    return [int(x) for x in m.group(1).split(", ")]


def affine_maps(op):
    m = re.search(r"indexing_maps = \[(.*?)\], iterator_types", op.text)
    maps = []
    for am in re.findall(r"affine_map<\(([^)]*)\) -> \(([^)]*)\)>", m.group(1)):
        dims = [d.strip() for d in am[0].split(",") if d.strip()]
        res = [r.strip() for r in am[1].split(",") if r.strip()]
        maps.append((dims, res))
    return maps


# --------------------------------------------------------------------------
# Interpretation
# --------------------------------------------------------------------------

CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal,
        4: np.greater, 5: np.greater_equal, 6: np.less, 7: np.less_equal,
        8: np.greater, 9: np.greater_equal}
CMPF = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less,
        5: np.less_equal, 6: np.not_equal, 8: np.equal, 9: np.greater,
        10: np.greater_equal, 11: np.less, 12: np.less_equal,
        13: np.not_equal}
BINARY = {
    "arith.addf": np.add, "arith.addi": np.add, "arith.subf": np.subtract,
    "arith.subi": np.subtract, "arith.mulf": np.multiply,
    "arith.muli": np.multiply, "arith.divf": np.divide,
    "arith.maximumf": np.maximum, "arith.maxnumf": np.fmax,
    "arith.minimumf": np.minimum, "arith.minnumf": np.fmin,
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.remui": np.remainder, "arith.remsi": np.remainder,
    "arith.divsi": lambda a, b: np.floor_divide(a, b),
    "arith.divui": lambda a, b: np.floor_divide(a, b),
    "arith.andi": np.logical_and, "arith.ori": np.logical_or,
    "arith.xori": np.logical_xor, "math.powf": np.power,
}
UNARY = {
    "arith.negf": np.negative, "math.exp": np.exp, "math.sqrt": np.sqrt,
    "math.rsqrt": lambda x: 1 / np.sqrt(x), "math.tanh": np.tanh,
    "math.erf": np.vectorize(math.erf, otypes=[np.float64]),
    "math.log": np.log, "math.absf": np.abs, "math.cos": np.cos,
    "math.sin": np.sin,
    "arith.index_cast": lambda x: np.asarray(x).astype(np.int64),
    "arith.sitofp": lambda x: np.asarray(x).astype(np.float64),
    "arith.uitofp": lambda x: np.asarray(x).astype(np.float64),
    "arith.fptosi": lambda x: np.asarray(x).astype(np.int64),
    "arith.extf": lambda x: x, "arith.truncf": lambda x: x,
    "arith.extsi": lambda x: x, "arith.trunci": lambda x: x,
    "arith.extui": lambda x: x, "arith.bitcast": lambda x: x,
}


def parse_constant(op):
    text = re.search(r"value = (.*?)\}>", op.text).group(1)
    rtype = result_types(op)[0]
    if text.startswith("dense<"):
        inner = text[len("dense<"):text.rfind("> :")]
        shape = tensor_shape(rtype)
        dtype = elem_dtype(rtype)
        if inner.startswith('"0x'):
            raise NotImplementedError("hex dense constant")
        inner = inner.replace("true", "1").replace("false", "0")
        value = np.array(eval(inner), dtype=dtype)
        return np.broadcast_to(value, shape).copy()
    value = text.split(" : ")[0]
    if value in ("true", "false"):
        return value == "true"
    if value.startswith("0x"):
        # A float printed by its bits (e.g. -inf as 0xFF800000 : f32).
        bits = int(value, 16)
        if text.split(" : ")[1].strip().startswith("f64"):
            return float(np.array(bits, dtype=np.uint64).view(np.float64))
        return float(np.array(bits, dtype=np.uint32).view(np.float32))
    return float(value) if ("." in value or "e" in value or "inf" in value
                            or "nan" in value) else int(value)


class Machine:
    def __init__(self, grid):
        self.grid = grid or []
        self.ranks = int(np.prod(self.grid)) if self.grid else 1
        self.mailbox = {}
        self.progress = 0

    def coords(self, rank):
        out = []
        for size in reversed(self.grid):
            out.append(rank % size)
            rank //= size
        return list(reversed(out))

    def rank_of(self, coords):
        r = 0
        for c, size in zip(coords, self.grid):
            r = r * size + c
        return r

    def group(self, rank, axes):
        """Ranks of the group of `rank` along `axes`, in group order."""
        base = self.coords(rank)
        members = []
        for idx in itertools.product(*[range(self.grid[a]) for a in axes]):
            c = list(base)
            for a, i in zip(axes, idx):
                c[a] = i
            members.append(self.rank_of(c))
        return members

    # One op on every rank of `active` (default: all) in lockstep; envs: one
    # dict per rank. A generator: it yields while a shard.recv waits for
    # its send (pipeline ranks run different cases of an scf.index_switch;
    # run_switch interleaves them).
    def run(self, ops, envs, active=None):
        active = list(range(self.ranks)) if active is None else active
        for op in ops:
            if op.name in ("func.return", "scf.yield", "linalg.yield"):
                return [[envs[r][v] for v in op.operands] for r in active]
            self.progress += 1
            if op.name == "scf.index_switch":
                yield from self.run_switch(op, envs, active)
                continue
            if op.name in ("shard.send", "shard.recv"):
                yield from self.point_to_point(op, envs, active)
                continue
            if op.name.startswith("shard.") or op.name in (
                    "stp.grid_permute", "stp.moe_all_to_all",
                    "stp.moe_shadow_broadcast", "stp.moe_shadow_reduce"):
                self.collective(op, envs, active)
                continue
            if op.name == "scf.for":
                yield from self.run_for(op, envs, active)
                continue
            for r in active:
                env = envs[r]
                values = self.local(op, env)
                for name, v in zip(op.results, values):
                    env[name] = v
        return None

    def run_all(self, ops, envs):
        gen = self.run(ops, envs)
        try:
            while True:
                next(gen)
                raise RuntimeError("deadlock: a receive outside any "
                                   "scf.index_switch waits forever")
        except StopIteration as stop:
            return stop.value

    def run_for(self, op, envs, active):
        lb, ub, step = (envs[active[0]][v] for v in op.operands[:3])
        args, body = op.regions[0]
        iters = [[envs[r][v] for v in op.operands[3:]] for r in active]
        for iv in range(lb, ub, step):
            for r, it in zip(active, iters):
                envs[r][args[0]] = iv
                for a, v in zip(args[1:], it):
                    envs[r][a] = v
            iters = yield from self.run(body, envs, active)
        for r, it in zip(active, iters):
            for name, v in zip(op.results, it):
                envs[r][name] = v

    def run_switch(self, op, envs, active):
        # Regions: the default, then one per case value.
        cases = i64_array(op, "cases")
        groups = {}
        for r in active:
            k = envs[r][op.operands[0]]
            region = op.regions[1 + cases.index(k)] if k in cases \
                else op.regions[0]
            groups.setdefault(id(region), (region, []))[1].append(r)
        running = [(self.run(region[1], envs, ranks), ranks)
                   for region, ranks in groups.values()]
        results = {}
        if False:
            yield  # a generator like run(); the cases are driven here
        while running:
            before = self.progress
            still = []
            for gen, ranks in running:
                try:
                    next(gen)
                    still.append((gen, ranks))
                except StopIteration as stop:
                    for r, vals in zip(ranks, stop.value):
                        results[r] = vals
            if len(still) == len(running) and self.progress == before:
                raise RuntimeError("deadlock: every pipeline rank waits "
                                   "for a receive")
            running = still
        for r in active:
            for name, v in zip(op.results, results[r]):
                envs[r][name] = v

    def point_to_point(self, op, envs, active):
        axis = i64_array(op, "grid_axes")[0]
        tag = int(re.search(r"stp.transfer = (\d+)", op.text).group(1))
        sending = op.name == "shard.send"
        peer = i64_array(op, "destination" if sending else "source")[0]
        def other(r):
            c = self.coords(r)
            c[axis] = peer
            return self.rank_of(c)
        if sending:
            for r in active:
                value = envs[r][op.operands[0]]
                self.mailbox[(r, other(r), tag)] = np.array(value, copy=True)
                envs[r][op.results[0]] = value
            return
        keys = [(other(r), r, tag) for r in active]
        while not all(k in self.mailbox for k in keys):
            yield
        for r, k in zip(active, keys):
            envs[r][op.results[0]] = self.mailbox.pop(k)

    def collective(self, op, envs, active):
        name = op.name
        if name == "shard.process_multi_index":
            axes = i64_array(op, "axes") or list(range(len(self.grid)))
            for rank in active:
                env = envs[rank]
                c = self.coords(rank)
                for res, a in zip(op.results, axes):
                    env[res] = c[a]
            return
        axes = i64_array(op, "grid_axes")
        src = op.operands[0]
        out = []
        for rank in active:
            env = envs[rank]
            members = self.group(rank, axes)
            g = members.index(rank)
            vals = [envs[m][src] for m in members]
            n = len(members)
            if name == "shard.all_reduce":
                kind = attr(op, "reduction") or "sum"
                f = (np.maximum if "max" in kind else
                     np.minimum if "min" in kind else np.add)
                acc = vals[0]
                for v in vals[1:]:
                    acc = f(acc, v)
                out.append(acc)
            elif name == "shard.all_gather":
                out.append(np.concatenate(vals, axis=int_attr(op, "gather_axis")))
            elif name == "shard.all_slice":
                d = int_attr(op, "slice_axis")
                out.append(np.split(vals[g], n, axis=d)[g])
            elif name == "shard.reduce_scatter":
                d = int_attr(op, "scatter_axis")
                out.append(np.split(sum(vals), n, axis=d)[g])
            elif name == "shard.all_to_all":
                s, c = int_attr(op, "split_axis"), int_attr(op, "concat_axis")
                out.append(np.concatenate(
                    [np.split(v, n, axis=s)[g] for v in vals], axis=c))
            elif name == "stp.grid_permute":
                out.append(vals[i64_array(op, "sources")[g]])
            elif name == "stp.moe_all_to_all":
                counts = [envs[m][op.operands[1]] for m in members]
                init = env[op.operands[2]] if len(op.operands) > 2 else None
                gs = re.search(r"group_size = (\d+)", op.text)
                st = re.search(r"step = (\d+)", op.text)
                out.append(moe_exchange(
                    vals, counts, g, n, re.search(r"\breverse\b", op.text),
                    int(gs.group(1)) if gs else 0,
                    int(st.group(1)) if st else 0, init))
            elif name in ("stp.moe_shadow_broadcast", "stp.moe_shadow_reduce"):
                # FasterMoE's shadowing: expert e's weights from (or its
                # gradient summed onto) member e // El.
                experts = i64_array(op, "experts")
                if name == "stp.moe_shadow_broadcast":
                    el = vals[0].shape[0]
                    out.append(np.stack([vals[e // el][e % el]
                                         for e in experts]))
                else:
                    res = env[op.operands[1]].copy()
                    el = res.shape[0]
                    for i, e in enumerate(experts):
                        if e // el == g:
                            res[e % el] += sum(v[i] for v in vals)
                    out.append(res)
            elif name == "shard.shift":
                a = int_attr(op, "shift_axis")
                k = int_attr(op, "offset")
                c = self.coords(rank)
                c[a] = (c[a] - k) % self.grid[a]
                out.append(envs[self.rank_of(c)][src])
            else:
                raise NotImplementedError(name)
        for env, v in zip([envs[r] for r in active], out):
            if isinstance(v, tuple):
                for res, x in zip(op.results, v):
                    env[res] = x
            else:
                env[op.results[0]] = v

    def local(self, op, env):
        name = op.name
        ins = [env[v] for v in op.operands]
        rtypes = result_types(op)
        if name == "arith.constant":
            return [parse_constant(op)]
        if name in BINARY:
            return [BINARY[name](ins[0], ins[1])]
        if name in UNARY:
            return [UNARY[name](ins[0])]
        if name == "arith.select":
            return [np.where(ins[0], ins[1], ins[2])]
        if name == "arith.cmpi":
            return [CMPI[int_attr(op, "predicate")](ins[0], ins[1])]
        if name == "arith.cmpf":
            return [CMPF[int_attr(op, "predicate")](ins[0], ins[1])]
        if name == "tensor.empty":
            return [np.zeros(tensor_shape(rtypes[0]), elem_dtype(rtypes[0]))]
        if name == "linalg.fill":
            return [np.full(tensor_shape(rtypes[0]), ins[0],
                            elem_dtype(rtypes[0]))]
        if name == "linalg.matmul" or name == "linalg.batch_matmul":
            return [ins[2] + np.matmul(ins[0], ins[1])]
        if name == "linalg.transpose":
            return [np.transpose(ins[0], i64_array(op, "permutation"))]
        if name == "linalg.softmax":
            d = int_attr(op, "dimension")
            e = np.exp(ins[0] - ins[0].max(axis=d, keepdims=True))
            return [e / e.sum(axis=d, keepdims=True)]
        if name == "linalg.generic":
            return self.generic(op, env, ins)
        if name in ("tensor.expand_shape", "tensor.collapse_shape"):
            return [ins[0].reshape(tensor_shape(rtypes[0]))]
        if name == "tensor.reshape":
            return [ins[0].reshape(tensor_shape(rtypes[0]))]
        if name == "tensor.concat":
            return [np.concatenate(ins, axis=int_attr(op, "dim"))]
        if name == "tensor.extract":
            return [ins[0][tuple(int(i) for i in ins[1:])]]
        if name == "tensor.extract_slice":
            return [self.extract_slice(op, ins, rtypes[0])]
        if name == "tensor.insert_slice":
            return [self.insert_slice(op, ins)]
        if name == "stp.layer_norm" or name == "stp.rms_norm":
            return [self.norm(op, ins)]
        if name == "stp.attention":
            return [self.attention(op, ins)]
        if name == "stp.scatter_elements":
            data, indices, updates = ins
            axis = int_attr(op, "axis")
            out = np.array(data, copy=True)
            idx = list(np.indices(indices.shape))
            idx[axis] = np.where(indices < 0, indices + data.shape[axis],
                                 indices)
            kind = re.search(r'reduction = "(\w+)"', op.text)
            kind = kind.group(1) if kind else "none"
            if kind == "none":
                out[tuple(idx)] = updates
            else:
                {"add": np.add, "mul": np.multiply, "max": np.maximum,
                 "min": np.minimum}[kind].at(out, tuple(idx), updates)
            return [out]
        if name == "stp.moe":
            return [moe(op, ins)]
        if name == "stp.moe_route":
            return list(moe_route(ins[0], ins[1], int_attr(op, "top_k"),
                                  re.search(r"\bnormalize\b", op.text)))
        if name == "stp.moe_dispatch":
            shape = tensor_shape(rtypes[0])
            return list(moe_dispatch_arrays(ins[0], ins[1], shape[0],
                                            shape[1],
                                            ins[2] if len(ins) > 2 else None))
        if name == "stp.moe_grad":
            return moe_grad(op, ins)
        if name == "stp.moe_gate_grad":
            return [moe_gate_grad(*ins)]
        if name == "stp.moe_experts_grad":
            # Operand groups: buffer, d_out, counts, w_in, w_mul, w_out,
            # hidden (kept A and U: recomputed here, the same values).
            sizes = [int(v) for v in re.search(
                r"operandSegmentSizes = array<i32: ([0-9, ]+)>",
                op.text).group(1).split(",")]
            weights = ins[3:3 + sum(sizes[3:6])]
            return moe_experts_grad(ins[0], ins[1], ins[2], weights,
                                    moe_act(op))
        if name == "stp.moe_route_grad":
            return list(moe_route_grad(*ins,
                                       re.search(r"\bnormalize\b", op.text)))
        if name == "stp.moe_experts":
            out = moe_experts(ins[0], ins[1], ins[2:], moe_act(op))
            # The kept A (and U) of a training step's experts.
            return [out] + moe_hidden(ins[0], ins[1], ins[2:])[:len(rtypes) - 1]
        if name == "stp.moe_combine":
            return [moe_combine(*ins)]
        if name == "stp.topk":
            axis, k = int_attr(op, "axis"), int_attr(op, "k")
            largest = "largest = true" in op.text
            order = np.argsort(-ins[0] if largest else ins[0], axis=axis,
                               kind="stable")
            idx = np.take(order, np.arange(k), axis=axis)
            return [np.take_along_axis(ins[0], idx, axis=axis), idx]
        raise NotImplementedError(name)

    def insert_slice(self, op, ins):
        # Operands: source, dest, dynamic offsets/sizes/strides.
        src, dest = ins[0], np.array(ins[1], copy=True)
        index = self.slice_index(op, ins[2:], i64_array(
            op, "operandSegmentSizes")[2:])
        dest[index] = np.reshape(src, [(s.stop - s.start + s.step - 1)
                                       // s.step for s in index])
        return dest

    def slice_index(self, op, dyn, seg):
        """The numpy index of a tensor slice op's offsets, sizes and
        strides (static, or the dynamic operands `dyn` where SENTINEL)."""
        offs, sizes, strides = (i64_array(op, "static_offsets"),
                                i64_array(op, "static_sizes"),
                                i64_array(op, "static_strides"))
        pos = 0
        lists = []
        for static in (offs, sizes, strides):
            vals = []
            for s in static:
                if s == SENTINEL:
                    vals.append(int(dyn[pos]))
                    pos += 1
                else:
                    vals.append(s)
            lists.append(vals)
        offs, sizes, strides = lists
        return tuple(slice(o, o + s * st, st)
                     for o, s, st in zip(offs, sizes, strides))

    def extract_slice(self, op, ins, rtype):
        index = self.slice_index(op, ins[1:], i64_array(
            op, "operandSegmentSizes")[1:])
        return ins[0][index].reshape(tensor_shape(rtype))

    def norm(self, op, ins):
        x = ins[0]
        axis = int_attr(op, "axis")
        eps = float(attr(op, "epsilon").split(":")[0])
        red = tuple(range(axis, x.ndim))
        if op.name == "stp.rms_norm":
            y = x / np.sqrt((x * x).mean(axis=red, keepdims=True) + eps)
            return y * ins[1]
        mu = x.mean(axis=red, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=red, keepdims=True)
        y = (x - mu) / np.sqrt(var + eps) * ins[1]
        return y + ins[2] if len(ins) > 2 else y

    def attention(self, op, ins):
        q, k, v = ins[:3]
        scale = float(attr(op, "scale").split(":")[0])
        rep = q.shape[1] // k.shape[1]
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if len(ins) > 3:
            s = s + ins[3]
        if re.search(r"\bcausal\b", op.text):
            sq, skv = s.shape[-2], s.shape[-1]
            i = np.arange(sq)[:, None]
            j = np.arange(skv)[None, :]
            s = np.where(j <= i + (skv - sq), s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return np.matmul(e / e.sum(axis=-1, keepdims=True), v)

    def generic(self, op, env, ins):
        maps = affine_maps(op)
        iters = re.findall(r"iterator_type<(\w+)>", op.text)
        nin = i64_array(op, "operandSegmentSizes")[0]
        ranges = [None] * len(iters)
        for value, (dims, res) in zip(ins, maps):
            for d, expr in enumerate(res):
                if expr in dims:
                    ranges[dims.index(expr)] = np.shape(value)[d]
        grids = np.indices(ranges)

        def index_of(dims, res):
            idx = []
            for expr in res:
                if expr in dims:
                    idx.append(grids[dims.index(expr)])
                else:
                    idx.append(int(expr))
            return tuple(idx)

        args, body = op.regions[0]
        benv = dict(env)
        for a, value, (dims, res) in zip(args, ins, maps):
            v = np.asarray(value)
            benv[a] = v[index_of(dims, res)] if v.ndim else v
        reduction = [i for i, t in enumerate(iters) if t == "reduction"]
        yielded = None
        for bop in body:
            if bop.name == "linalg.yield":
                yielded = bop.operands
                break
            if bop.name == "linalg.index":
                benv[bop.results[0]] = grids[int_attr(bop, "dim")]
                continue
            if bop.name == "tensor.extract":
                t = benv[bop.operands[0]]
                benv[bop.results[0]] = t[tuple(np.asarray(benv[i]).astype(np.int64)
                                               for i in bop.operands[1:])]
                continue
            values = self.local(bop, benv)
            benv[bop.results[0]] = values[0]
        defs = {r: b for b in body for r in b.results}
        outs = []
        for k, y in enumerate(yielded):
            init = np.array(ins[nin + k], copy=True)
            dims, res = maps[nin + k]
            idx = index_of(dims, res)
            out_arg = args[nin + k]
            if not reduction:
                init[idx] = np.broadcast_to(benv[y], ranges)
                outs.append(init)
                continue
            d = defs.get(y)
            if d is None or out_arg not in d.operands:
                raise NotImplementedError("reduction body")
            other = [o for o in d.operands if o != out_arg][0]
            e = np.broadcast_to(benv[other], ranges)
            if init.ndim == 0:
                # A reduction to a scalar (a loss): combine all points.
                combine = {"arith.addf": np.sum, "arith.addi": np.sum,
                           "arith.maximumf": np.max, "arith.maxnumf": np.max,
                           "arith.maxsi": np.max, "arith.minimumf": np.min,
                           "arith.minnumf": np.min, "arith.minsi": np.min}
                if d.name not in combine:
                    raise NotImplementedError("combiner " + d.name)
                pair = np.array([init, combine[d.name](e)], dtype=init.dtype)
                init = np.array(pair.sum() if combine[d.name] is np.sum
                                else combine[d.name](pair), dtype=init.dtype)
                outs.append(init)
                continue
            if d.name in ("arith.addf", "arith.addi"):
                np.add.at(init, idx, e)
            elif d.name in ("arith.maximumf", "arith.maxnumf", "arith.maxsi"):
                np.maximum.at(init, idx, e)
            elif d.name in ("arith.minimumf", "arith.minnumf", "arith.minsi"):
                np.minimum.at(init, idx, e)
            else:
                raise NotImplementedError("combiner " + d.name)
            outs.append(init)
        return outs


def moe_act(op):
    return re.search(r'activation = "(\w+)"', op.text).group(1)


def moe_route(tokens, router, k, normalize):
    logits = tokens @ router
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    idx = np.argsort(-p, axis=1, kind="stable")[:, :k]
    g = np.take_along_axis(p, idx, axis=1)
    if normalize:
        g = g / g.sum(axis=1, keepdims=True)
    return g.astype(tokens.dtype), idx.astype(np.int64)


def moe_dispatch(tokens, experts, capacity):
    n = tokens.shape[0]
    counts = {}
    slots = np.full(experts.shape, -1, np.int64)
    rows = []
    for t in range(n):
        for j in range(experts.shape[1]):
            x = int(experts[t, j])
            c = counts.get(x, 0)
            if c < capacity:
                slots[t, j] = c
                counts[x] = c + 1
                rows.append((x, c, t))
    return rows, counts, slots


def moe_dispatch_arrays(tokens, experts, num_experts, capacity, weights=None):
    rows, counts, slots = moe_dispatch(tokens, experts, capacity)
    buf = np.zeros((num_experts, capacity, tokens.shape[1]), tokens.dtype)
    cnt = np.zeros((num_experts, 1), np.int64)
    for x, c, t in rows:
        buf[x, c] = tokens[t]
        if weights is not None:
            j = [i for i in range(experts.shape[1])
                 if experts[t, i] == x][0]
            buf[x, c] *= weights[t, j]
    for x, c in counts.items():
        cnt[x, 0] = c
    return buf, cnt, slots


def moe_activation(name, x):
    if name == "silu":
        return x / (1 + np.exp(-x))
    if name == "gelu":
        from math import erf
        return 0.5 * x * (1 + np.vectorize(erf, otypes=[x.dtype])(x / np.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                      (x + 0.044715 * x ** 3)))
    return np.maximum(x, 0)


def moe_experts(buffer, counts, weights, act):
    w_in, w_out = weights[0], weights[-1]
    w_mul = weights[1] if len(weights) == 3 else None
    el, s, _ = buffer.shape
    p = counts.shape[1]
    c = s // p
    out = np.zeros_like(buffer)
    for x in range(el):
        for g in range(p):
            rows = buffer[x, g * c:g * c + int(counts[x, g])]
            h = moe_activation(act, rows @ w_in[x])
            if w_mul is not None:
                h = h * (rows @ w_mul[x])
            out[x, g * c:g * c + len(rows)] = h @ w_out[x]
    return out


def moe_hidden(buffer, counts, weights):
    """A = rows @ w_in and, gated, U = rows @ w_mul per used row (zero
    elsewhere): what stp.moe_experts keeps for the backward."""
    el, s, _ = buffer.shape
    p = counts.shape[1]
    c = s // p
    mats = [weights[0]] + ([weights[1]] if len(weights) == 3 else [])
    kept = [np.zeros((el, s, m.shape[2]), buffer.dtype) for m in mats]
    for x in range(el):
        for g in range(p):
            rows = buffer[x, g * c:g * c + int(counts[x, g])]
            for k, m in zip(kept, mats):
                k[x, g * c:g * c + len(rows)] = rows @ m[x]
    return kept


def moe_combine(outputs, slots, experts, gates):
    n, k = gates.shape
    out = np.zeros((n, outputs.shape[2]), outputs.dtype)
    for t in range(n):
        for j in range(k):
            if slots[t, j] >= 0:
                out[t] += gates[t, j] * outputs[experts[t, j], slots[t, j]]
    return out


def moe_exchange(vals, counts, g, p, reverse, group=0, step=0, init=None):
    """stp.moe_all_to_all as device g of a group of p sees it: only the used
    rows move; the rest of the result is zero (or init's). With smart
    scheduling only the (source w, owner q) pairs of `step` move."""
    def pair(w, q):
        if group == 0:
            return True
        steps = p // group
        return (q // group - w // group) % steps == step
    if not reverse:
        e, c, d = vals[0].shape
        el = e // p
        rows = np.zeros((el, p * c, d), vals[0].dtype)
        cnt = np.zeros((el, p), np.int64)
        for q in range(p):
            for x in range(el):
                n = int(counts[q][g * el + x, 0]) if pair(q, g) else 0
                rows[x, q * c:q * c + n] = vals[q][g * el + x, :n]
                cnt[x, q] = n
        return rows, cnt
    el, s, d = vals[0].shape
    c = s // p
    rows = (np.zeros((el * p, c, d), vals[0].dtype) if init is None
            else np.array(init, copy=True))
    cnt = np.zeros((el * p, 1), np.int64)
    for q in range(p):
        for x in range(el):
            n = int(counts[q][x, g]) if pair(g, q) else 0
            rows[q * el + x, :n] = vals[q][x, g * c:g * c + n]
            cnt[q * el + x, 0] = n
    return rows, cnt


def moe_activation_grad(name, x):
    if name == "silu":
        s = 1 / (1 + np.exp(-x))
        return s * (1 + x * (1 - s))
    if name == "gelu":
        from math import erf
        e = np.vectorize(erf, otypes=[x.dtype])(x / np.sqrt(2))
        return 0.5 * (1 + e) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    if name == "gelu_tanh":
        k = np.sqrt(2 / np.pi)
        th = np.tanh(k * (x + 0.044715 * x ** 3))
        return (0.5 * (1 + th) +
                0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x))
    return (x > 0).astype(x.dtype)


def moe_gate_grad(outputs, slots, experts, dy):
    n, k = slots.shape
    dg = np.zeros((n, k), dy.dtype)
    for t in range(n):
        for j in range(k):
            if slots[t, j] >= 0:
                dg[t, j] = outputs[experts[t, j], slots[t, j]] @ dy[t]
    return dg


def ffn_backward(x, dout, w_in, w_mul, w_out, act):
    """One expert's backward on rows x with output gradient dout: dx and
    the weights' gradients."""
    a = x @ w_in
    u = x @ w_mul if w_mul is not None else None
    h = moe_activation(act, a) * (u if u is not None else 1)
    dh = dout @ w_out.T
    da = dh * (u if u is not None else 1) * moe_activation_grad(act, a)
    dx = da @ w_in.T
    grads = [x.T @ da]
    if u is not None:
        du = dh * moe_activation(act, a)
        dx = dx + du @ w_mul.T
        grads.append(x.T @ du)
    grads.append(h.T @ dout)
    return dx, grads


def moe_experts_grad(buffer, d_out, counts, weights, act):
    w_in, w_out = weights[0], weights[-1]
    w_mul = weights[1] if len(weights) == 3 else None
    el, s, _ = buffer.shape
    p = counts.shape[1]
    c = s // p
    d_rows = np.zeros_like(buffer)
    dws = [np.zeros_like(w) for w in weights]
    for x in range(el):
        for g in range(p):
            n = int(counts[x, g])
            rows = slice(g * c, g * c + n)
            dx, grads = ffn_backward(
                buffer[x, rows], d_out[x, rows], w_in[x],
                w_mul[x] if w_mul is not None else None, w_out[x], act)
            d_rows[x, rows] = dx
            for dw, gw in zip(dws, grads):
                dw[x] += gw
    return [d_rows] + dws


def moe_route_grad(tokens, router, experts, dg, normalize):
    logits = tokens @ router
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    sel = np.take_along_axis(p, experts, axis=1)
    s = sel.sum(axis=1, keepdims=True) if normalize else np.ones_like(sel[:, :1])
    g = sel / s
    dsel = (dg - (dg * g).sum(axis=1, keepdims=True)) / s if normalize else dg
    dp = np.zeros_like(p)
    np.put_along_axis(dp, experts, dsel, axis=1)
    dl = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    return dl @ router.T, tokens.T @ dl


def moe_grad(op, ins):
    """stp.moe_grad on the whole layer, densely: every expert on every
    token, weighted by the top-k gates (zero elsewhere)."""
    tokens, router, dy = ins[1], ins[2], ins[-1]
    weights = ins[3:-1]
    w_in, w_out = weights[0], weights[-1]
    w_mul = weights[1] if len(weights) == 3 else None
    act = moe_act(op)
    normalize = re.search(r"\bnormalize\b", op.text)
    gates, experts = moe_route(tokens, router, int_attr(op, "top_k"),
                               normalize)
    dx = np.zeros_like(tokens)
    dws = [np.zeros_like(w) for w in weights]
    dg = np.zeros_like(gates)
    for x in range(router.shape[1]):
        a = tokens @ w_in[x]
        h = moe_activation(act, a) * (tokens @ w_mul[x] if w_mul is not None
                                      else 1)
        out = h @ w_out[x]
        gx = np.where(experts == x, gates, 0).sum(axis=1, keepdims=True)
        dg += np.where(experts == x, (out * dy).sum(axis=1, keepdims=True), 0)
        dxe, grads = ffn_backward(tokens, gx * dy, w_in[x],
                                  w_mul[x] if w_mul is not None else None,
                                  w_out[x], act)
        dx += dxe
        for dw, gw in zip(dws, grads):
            dw[x] += gw
    dxr, dr = moe_route_grad(tokens, router, experts, dg, normalize)
    return [dx + dxr, dr] + dws


def moe(op, ins):
    tokens, router, weights = ins[0], ins[1], ins[2:]
    gates, experts = moe_route(tokens, router, int_attr(op, "top_k"),
                               re.search(r"\bnormalize\b", op.text))
    n = tokens.shape[0]
    buf, cnt, slots = moe_dispatch_arrays(tokens, experts, router.shape[1], n)
    out = moe_experts(buf, cnt, weights, moe_act(op))
    return moe_combine(out, slots, experts, gates)


def func_args(func):
    ftype = re.search(r"function_type = \((.*?)\) ->", func.text).group(1)
    types = split_top(ftype)
    arg_attrs = re.search(r"arg_attrs = \[(.*?)\], function_type", func.text)
    attrs = split_top(arg_attrs.group(1)) if arg_attrs else [""] * len(types)
    splits = []
    for a in attrs:
        m = re.search(r"stp\.split = (\[.*\])", a)
        splits.append(eval(m.group(1).split("]]")[0] + "]]") if m and
                      m.group(1).startswith("[[") else
                      eval(m.group(1)) if m else None)
    return types, splits


def check(global_text, partitioned_text, int_high, bitwise=False):
    _, gfunc = parse_module(global_text)
    grid, pfunc = parse_module(partitioned_text)
    rng = np.random.default_rng(0)
    gtypes, _ = func_args(gfunc)
    ptypes, splits = func_args(pfunc)
    inputs = []
    for t in gtypes:
        shape = tensor_shape(t)
        if elem_dtype(t) == np.int64:
            inputs.append(rng.integers(0, int_high, size=shape))
        else:
            inputs.append(rng.standard_normal(shape))
    ref_machine = Machine(None)
    env = {a: v for a, v in zip(gfunc.regions[0][0], inputs)}
    ref = ref_machine.run_all(gfunc.regions[0][1], [env])[0]

    machine = Machine(grid)
    envs = []
    for rank in range(machine.ranks):
        coords = machine.coords(rank)
        env = {}
        for a, value, split in zip(pfunc.regions[0][0], inputs, splits):
            local = value
            for d, axes in enumerate(split or []):
                if not axes:
                    continue
                n, blk = 1, 0
                for ax in axes:
                    n *= grid[ax]
                    blk = blk * grid[ax] + coords[ax]
                local = np.split(local, n, axis=d)[blk]
            env[a] = local
        envs.append(env)
    outs = machine.run_all(pfunc.regions[0][1], envs)
    # A pipelined program: result i is returned by the ranks of pipeline
    # rank owners[i] only (stp.pipeline_rank).
    pipe = re.search(r"stp.pipeline = \{grid_axis = (\d+)", pfunc.text)
    owners = [None] * len(ref)
    res_attrs = re.search(r"res_attrs = \[(.*?)\], sym_name", pfunc.text)
    if pipe and res_attrs:
        for i, a in enumerate(split_top(res_attrs.group(1))):
            m = re.search(r"stp.pipeline_rank = (\d+)", a)
            owners[i] = int(m.group(1)) if m else None
    for rank, out in enumerate(outs):
        for i, (got, want) in enumerate(zip(out, ref)):
            if owners[i] is not None and \
                    machine.coords(rank)[int(pipe.group(1))] != owners[i]:
                continue
            if np.shape(got) != np.shape(want) or not np.allclose(
                    got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
                err = (np.abs(np.asarray(got) - want).max()
                       if np.shape(got) == np.shape(want) else "shape")
                print(f"MISMATCH: result {i} on rank {rank}: "
                      f"{np.shape(got)} vs {np.shape(want)}, max error {err}")
                return False
    if bitwise:
        # Replicated results are the same bits on every rank (what a
        # replicated parameter needs to stay replicated after an update).
        for rank, out in enumerate(outs[1:], start=1):
            for i, (got, first) in enumerate(zip(out, outs[0])):
                if not np.array_equal(np.asarray(got), np.asarray(first)):
                    print(f"MISMATCH: result {i} on rank {rank} differs "
                          f"bitwise from rank 0's")
                    return False
        print(f"ok: {len(ref)} results match on {machine.ranks} ranks, "
              f"bitwise equal on all ranks")
        return True
    print(f"ok: {len(ref)} results match on {machine.ranks} ranks")
    return True


def main():
    np.seterr(all="ignore")
    split = re.compile(r"^// -----$", re.M)
    chunks = [split.split(open(path).read()) for path in sys.argv[1:3]]
    if len(chunks[0]) != len(chunks[1]):
        print("MISMATCH: different numbers of modules")
        sys.exit(1)
    int_high = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    bitwise = "--bitwise" in sys.argv[4:]
    ok = all([check(g, p, int_high, bitwise) for g, p in zip(*chunks)])
    sys.exit(0 if ok else 1)


main()
