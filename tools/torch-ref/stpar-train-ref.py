#!/usr/bin/python3
# stpar-train-ref.py - the independent reference of `stpar verify --train`.
#
# Part of stpar. Runs on Debian's /usr/bin/python3 with python3-torch
# (1.13), python3-onnx and python3-numpy (scripts/install-deps.sh).
#
# It evaluates the unpartitioned ONNX model with PyTorch (a small ONNX ->
# torch evaluator of the op set stpar imports, below), computes the same
# training step as the program stpar compiled (loss, autograd gradients,
# torch.optim.SGD / AdamW) and compares, step by step, with the program:
#
#   stpar-train-ref.py verify --model M.onnx --io io.json --inputs DIR
#       --work DIR --steps N --loss L --optimizer O --lr X [--weight-decay X]
#       [--beta1 X --beta2 X --eps X] [--rtol X] [--forward-ref DIR]
#       -- mpirun ... stpar_program
#
# The program is run once per step (the command after `--`, with
# `--weights W --inputs I --outputs O` appended): step 1 reads the model's
# own folder; step k+1 reads a copy of it in which every parameter's bytes
# (io.json "parameters": file and offset) hold the program's updated values
# of step k, and the optimizer state inputs the program's state outputs.
# The reference starts from the same initial weights and inputs and runs
# its own N steps in float64.
#
# Compared (docs/training.md): the loss of every step, every gradient of
# step 1, and after the last step every parameter and its total update
# (W_N - W_0). Error of a tensor: max |actual - reference| / max |reference|
# (the tensor's largest magnitude); PASS iff <= --rtol, except that an
# update may also differ by the float32 rounding of W at each step
# (2 * steps * 2^-24 * max |W_0|), and a tensor much smaller than the
# others of its kind (gradients; updates) may differ by rtol * 1e-3 times
# the largest of them (an exactly-zero gradient is rounding noise in both).
# With AdamW, which divides each element's step by its own gradient
# magnitude, an element may also differ by steps * lr * min(cap, rtol *
# max|g| / (|g_i| + eps)): what the allowed gradient error does to it, cap
# being twice Adam's largest step in units of lr (Kingma & Ba 2015, Sec.
# 2.1; the line counts the elements where this dominates). Exit 0 iff all
# pass.
#
# `selftest` checks the reference itself: its forward against ONNX Runtime
# outputs (--forward-ref, written by tools/ort-run) and its gradients
# against central finite differences on a few parameters.

import argparse
import json
import os
import math
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

import torch
import torch.nn.functional as F

import stpar_mpirun

DTYPES = {'float32': np.float32, 'float64': np.float64, 'int64': np.int64,
          'int32': np.int32, 'int8': np.int8, 'uint8': np.uint8,
          'bool': np.uint8}
REF = torch.float64


def fail(message):
    sys.stderr.write('stpar-train-ref: error: %s\n' % message)
    sys.exit(2)


# ---------------------------------------------------------------------------
# ONNX -> torch evaluator
# ---------------------------------------------------------------------------

ONNX_TO_TORCH = {1: REF, 10: REF, 11: REF, 16: REF, 7: torch.int64,
                 6: torch.int32, 5: torch.int16, 3: torch.int8, 2: torch.uint8,
                 9: torch.bool}


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


def broadcast_shape(a, b):
    return list(torch.broadcast_shapes(tuple(a), tuple(b)))


class Evaluator:
    """Evaluates an ONNX graph with torch ops; floats in float64."""

    def __init__(self, model):
        self.model = model
        self.graph = model.graph
        self.opset = max((o.version for o in model.opset_import
                          if o.domain in ('', 'ai.onnx')), default=13)
        init_names = {i.name for i in self.graph.initializer}
        self.inputs = [i.name for i in self.graph.input
                       if i.name not in init_names]
        self.nodes = self.topological(self.graph)

    @staticmethod
    def topological(graph):
        produced = {}
        for k, n in enumerate(graph.node):
            for o in n.output:
                produced[o] = k
        order, state = [], {}

        def visit(k):
            if state.get(k) == 2:
                return
            if state.get(k) == 1:
                fail('the graph has a cycle')
            state[k] = 1
            for i in graph.node[k].input:
                if i in produced:
                    visit(produced[i])
            state[k] = 2
            order.append(graph.node[k])

        for k in range(len(graph.node)):
            visit(k)
        return order

    def run(self, params, feeds):
        env = dict(params)
        env.update(feeds)
        env[''] = None
        for node in self.nodes:
            args = [env[i] if i else None for i in node.input]
            try:
                outs = self.op(node, args)
            except Exception as e:  # a clear message naming the node
                fail("node '%s' (%s): %s" % (node.name, node.op_type, e))
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, value in zip(node.output, outs):
                env[name] = value
        return {o.name: env[o.name] for o in self.graph.output}

    def op(self, node, x):
        t, a = node.op_type, attrs(node)
        if node.domain not in ('', 'ai.onnx'):
            raise ValueError('operator domain %r is not supported' % node.domain)
        binary = {'Add': torch.add, 'Sub': torch.sub, 'Mul': torch.mul,
                  'Pow': torch.pow, 'Equal': torch.eq, 'Less': torch.lt,
                  'Greater': torch.gt}
        if t in binary:
            return binary[t](x[0], x[1])
        if t == 'Div':
            if not x[0].is_floating_point() and not x[1].is_floating_point():
                return torch.div(x[0], x[1], rounding_mode='trunc')
            return x[0] / x[1]
        unary = {'Sqrt': torch.sqrt, 'Erf': torch.erf, 'Tanh': torch.tanh,
                 'Sigmoid': torch.sigmoid, 'Neg': torch.neg, 'Exp': torch.exp,
                 'Log': torch.log, 'Relu': torch.relu, 'Abs': torch.abs,
                 'Reciprocal': torch.reciprocal, 'Identity': lambda v: v,
                 'Not': torch.logical_not}
        if t in unary:
            return unary[t](x[0])
        if t in ('Min', 'Max'):
            f = torch.minimum if t == 'Min' else torch.maximum
            r = x[0]
            for v in x[1:]:
                r = f(r, v)
            return r
        if t == 'MatMul':
            return torch.matmul(x[0], x[1])
        if t == 'Gemm':
            A = x[0].t() if a.get('transA', 0) else x[0]
            B = x[1].t() if a.get('transB', 0) else x[1]
            r = a.get('alpha', 1.0) * (A @ B)
            if len(x) > 2 and x[2] is not None:
                r = r + a.get('beta', 1.0) * x[2]
            return r
        if t == 'Gather':
            data, idx = x[0], x[1]
            axis = a.get('axis', 0) % data.dim()
            idx = torch.where(idx < 0, idx + data.shape[axis], idx)
            flat = data.index_select(axis, idx.reshape(-1))
            return flat.reshape(list(data.shape[:axis]) + list(idx.shape) +
                                list(data.shape[axis + 1:]))
        if t == 'Reshape':
            shape = ints(x[1])
            if not a.get('allowzero', 0):
                shape = [x[0].shape[i] if s == 0 else s
                         for i, s in enumerate(shape)]
            return x[0].reshape(shape)
        if t == 'Transpose':
            perm = a.get('perm', list(range(x[0].dim()))[::-1])
            return x[0].permute(*perm)
        if t in ('Unsqueeze', 'Squeeze'):
            axes = a.get('axes') if 'axes' in a else (
                ints(x[1]) if len(x) > 1 and x[1] is not None else None)
            v = x[0]
            if t == 'Squeeze':
                if axes is None:
                    return v.squeeze()
                for ax in sorted((ax % v.dim() for ax in axes), reverse=True):
                    v = v.squeeze(ax)
                return v
            rank = v.dim() + len(axes)
            for ax in sorted(ax % rank for ax in axes):
                v = v.unsqueeze(ax)
            return v
        if t == 'Concat':
            return torch.cat(x, dim=a['axis'])
        if t == 'Split':
            axis = a.get('axis', 0)
            if len(x) > 1 and x[1] is not None:
                sizes = ints(x[1])
            elif 'split' in a:
                sizes = list(a['split'])
            else:
                n = a.get('num_outputs', len(node.output))
                size = -(-x[0].shape[axis] // n)
                sizes = [min(size, x[0].shape[axis] - k * size)
                         for k in range(n)]
            return list(torch.split(x[0], sizes, dim=axis))
        if t == 'Slice':
            v = x[0]
            starts, ends = ints(x[1]), ints(x[2])
            axes = ints(x[3]) if len(x) > 3 and x[3] is not None else \
                list(range(len(starts)))
            steps = ints(x[4]) if len(x) > 4 and x[4] is not None else \
                [1] * len(starts)
            index = [slice(None)] * v.dim()
            for s, e, ax, st in zip(starts, ends, axes, steps):
                if st <= 0:
                    raise ValueError('non-positive Slice steps are not supported')
                n = v.shape[ax]
                s = max(0, min(n, s + n if s < 0 else s))
                e = max(0, min(n, e + n if e < 0 else e))
                index[ax] = slice(s, e, st)
            return v[tuple(index)]
        if t == 'Shape':
            shape = list(x[0].shape)
            start, end = a.get('start', 0), a.get('end', len(shape))
            return torch.tensor(shape[start:end], dtype=torch.int64)
        if t == 'Cast':
            return x[0].to(ONNX_TO_TORCH[a['to']])
        if t == 'Constant':
            if 'value' in a:
                return torch.from_numpy(
                    numpy_helper.to_array(a['value']).copy()).to(
                        self.ref_dtype(a['value'].data_type))
            if 'value_float' in a:
                return torch.tensor(a['value_float'], dtype=REF)
            if 'value_floats' in a:
                return torch.tensor(a['value_floats'], dtype=REF)
            if 'value_int' in a:
                return torch.tensor(a['value_int'], dtype=torch.int64)
            if 'value_ints' in a:
                return torch.tensor(a['value_ints'], dtype=torch.int64)
            raise ValueError('Constant without a supported value attribute')
        if t == 'ConstantOfShape':
            shape = ints(x[0])
            if 'value' in a:
                v = numpy_helper.to_array(a['value']).reshape(-1)[0]
                dtype = self.ref_dtype(a['value'].data_type)
            else:
                v, dtype = 0.0, torch.float32
            return torch.full(shape, float(v) if dtype.is_floating_point
                              else int(v), dtype=dtype)
        if t == 'Where':
            return torch.where(x[0], x[1], x[2])
        if t == 'Expand':
            shape = broadcast_shape(x[0].shape, ints(x[1]))
            return x[0].expand(shape)
        if t == 'Range':
            return torch.arange(x[0].item(), x[1].item(), x[2].item(),
                                dtype=x[0].dtype)
        if t == 'Trilu':
            k = int(x[1].item()) if len(x) > 1 and x[1] is not None else 0
            return torch.triu(x[0], k) if a.get('upper', 1) else \
                torch.tril(x[0], k)
        if t == 'Softmax':
            v = x[0]
            if self.opset >= 13:
                return torch.softmax(v, dim=a.get('axis', -1))
            axis = a.get('axis', 1) % v.dim()
            flat = v.reshape(list(v.shape[:axis]) + [-1])
            return torch.softmax(flat, dim=-1).reshape(v.shape)
        if t == 'LayerNormalization':
            v = x[0]
            axis = a.get('axis', -1) % v.dim()
            bias = x[2] if len(x) > 2 else None
            return F.layer_norm(v, v.shape[axis:], x[1], bias,
                                a.get('epsilon', 1e-5))
        if t == 'TopK':
            # Values and indices; ties to the lower index (ONNX TopK).
            k = int(ints(x[1])[0])
            axis = a.get('axis', -1)
            largest = bool(a.get('largest', 1))
            v = x[0]
            # A stable sort keeps equal values in index order.
            order = torch.sort(v if not largest else -v, dim=axis,
                               stable=True).indices.narrow(axis, 0, k)
            return torch.gather(v, axis, order), order
        if t == 'ScatterElements':
            if a.get('reduction', 'none') != 'none':
                raise ValueError('reduction %r is not supported'
                                 % a.get('reduction'))
            return torch.scatter(x[0], a.get('axis', 0), x[1].long(), x[2])
        if t == 'Einsum':
            return torch.einsum(a['equation'].decode()
                                if isinstance(a['equation'], bytes)
                                else a['equation'], *x)
        if t in ('ReduceMean', 'ReduceSum'):
            axes = a.get('axes') if 'axes' in a else (
                ints(x[1]) if len(x) > 1 and x[1] is not None else None)
            keep = bool(a.get('keepdims', 1))
            f = torch.mean if t == 'ReduceMean' else torch.sum
            if axes is None or len(axes) == 0:
                r = f(x[0])
                return r.reshape([1] * x[0].dim()) if keep else r
            return f(x[0], dim=tuple(axes), keepdim=keep)
        raise ValueError('not supported by the reference evaluator')

    @staticmethod
    def ref_dtype(onnx_type):
        return ONNX_TO_TORCH.get(onnx_type, REF)


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def read_bin(path, dtype, shape):
    data = np.fromfile(path, dtype=DTYPES[dtype])
    n = int(np.prod(shape)) if shape else 1
    if data.size != n:
        fail('%s: %d elements, expected %d' % (path, data.size, n))
    return data.reshape(shape)


def write_bin(path, array, dtype):
    np.ascontiguousarray(array, dtype=DTYPES[dtype]).tofile(path)


def load_params(model, model_dir):
    """Initializers (external data resolved); floats in float64. Trainable
    ones (stpar's import rule, docs/import.md: floating-point, more than one
    element, doc_string not starting with "buffer") are leaves with
    requires_grad."""
    params = {}
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init, base_dir=model_dir)
        t = torch.from_numpy(np.array(arr))
        if t.is_floating_point():
            t = t.to(REF)
            if t.numel() > 1 and not init.doc_string.startswith('buffer'):
                t.requires_grad_(True)
        params[init.name] = t
    return params


# ---------------------------------------------------------------------------
# The training step in torch
# ---------------------------------------------------------------------------

class Step:
    def __init__(self, evaluator, opts, io):
        self.ev = evaluator
        self.opts = opts
        self.io = io

    def loss(self, outputs, feeds, labels):
        o = self.opts
        names = [g.name for g in self.ev.graph.output]
        name = o.loss_output or next(
            n for n in names if outputs[n].is_floating_point())
        y = outputs[name]
        if o.loss == 'sum':
            rows = y.numel() // y.shape[-1] if y.dim() else 1
            return y.sum() / rows
        if o.loss == 'mean-square':
            return (y * y).mean()
        classes = y.shape[-1]
        if o.loss == 'next-token':
            ids = next(v for k, v in feeds.items()
                       if not v.is_floating_point()
                       and list(v.shape) == list(y.shape[:-1]))
            logits = y[..., :-1, :].reshape(-1, classes)
            target = ids[..., 1:].reshape(-1)
        else:
            logits = y.reshape(-1, classes)
            target = labels.reshape(-1)
        return F.cross_entropy(logits, target, reduction='sum') / \
            (target >= 0).sum()

    def make_optimizer(self, trained):
        o = self.opts
        if o.optimizer == 'sgd':
            return torch.optim.SGD(trained, lr=o.lr, weight_decay=o.weight_decay)
        return torch.optim.AdamW(trained, lr=o.lr, betas=(o.beta1, o.beta2),
                                 eps=o.eps, weight_decay=o.weight_decay)


def io_inputs(io, directory, names):
    feeds = {}
    for t in io['inputs']:
        if t['name'] in names:
            arr = read_bin(os.path.join(directory, t['file']), t['dtype'],
                           t['shape'])
            v = torch.from_numpy(np.array(arr))
            feeds[t['name']] = v.to(REF) if v.is_floating_point() else \
                v.to(torch.bool) if t['dtype'] == 'bool' else v
    return feeds


def error(actual, reference):
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if a.shape != r.shape:
        return float('inf'), float('inf')
    if np.isnan(a).any():
        return float('nan'), float('inf')
    diff = float(np.max(np.abs(a - r))) if a.size else 0.0
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    return diff, (diff / scale if scale > 0 else (0.0 if diff == 0 else
                                                   float('inf')))


class Report:
    def __init__(self, rtol):
        self.rtol = rtol
        self.passed = self.failed = 0
        # The largest error / tolerance of any element (<= 1: all pass).
        self.worst = 0.0

    def line(self, what, actual, reference, floor=0.0):
        """PASS iff |a_i - r_i| <= rtol * max|r| + floor_i for every i
        (`floor` a number or an array like the tensors)."""
        diff, rel = error(actual, reference)
        scale = float(np.max(np.abs(reference))) if np.size(reference) else 0
        a = np.asarray(actual, dtype=np.float64)
        r = np.asarray(reference, dtype=np.float64)
        ok = a.shape == r.shape and not np.isnan(a).any() and bool(
            np.all(np.abs(a - r) <= self.rtol * scale + floor))
        if ok and a.size:
            tolerance = self.rtol * scale + np.broadcast_to(floor, a.shape)
            ratio = np.abs(a - r) / np.maximum(tolerance, 1e-300)
            self.worst = max(self.worst, float(np.max(ratio)))
        elif not ok:
            self.worst = float('inf')
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print('%-58s max_abs_err=%.3e rel_err=%.3e %s' %
              (what, diff, rel, 'PASS' if ok else 'FAIL'))
        sys.stdout.flush()
        return ok


def verify(opts):
    io = json.load(open(opts.io))
    model = onnx.load(opts.model, load_external_data=False)
    model_dir = os.path.dirname(os.path.abspath(opts.model))
    ev = Evaluator(model)
    params = load_params(model, model_dir)
    step = Step(ev, opts, io)
    graph_inputs = set(ev.inputs)
    feeds = io_inputs(io, opts.inputs, graph_inputs)
    missing = graph_inputs - set(feeds)
    if missing:
        fail('io.json has no input for %s' % ', '.join(sorted(missing)))
    outputs = {t['name']: t for t in io['outputs']}
    param_table = {p['name']: p for p in io.get('parameters', [])}
    trained = [n[len('param:'):] for n in outputs if n.startswith('param:')]
    if not trained:
        fail('io.json has no param:<name> outputs: not a training step')
    for n in trained:
        if n not in params or n not in param_table:
            fail("parameter '%s' is not an initializer of the model" % n)

    # Labels of cross-entropy=NAME: uniform in [0, classes), fixed seed.
    labels = None
    label_input = None
    if opts.loss.startswith('cross-entropy='):
        label_input = opts.loss.split('=', 1)[1]
        opts.loss = 'cross-entropy'
        t = next((t for t in io['inputs'] if t['name'] == label_input), None)
        if t is None:
            fail("io.json has no labels input '%s'" % label_input)
        classes = opts.classes
        if classes <= 0:
            with torch.no_grad():
                out = ev.run(params, feeds)
            name = opts.loss_output or next(
                g.name for g in ev.graph.output
                if out[g.name].is_floating_point())
            classes = out[name].shape[-1]
        rng = np.random.default_rng(opts.seed)
        lab = rng.integers(0, classes, size=t['shape'], dtype=np.int64)
        write_bin(os.path.join(opts.inputs, t['file']), lab, t['dtype'])
        labels = torch.from_numpy(lab)

    # The reference: N steps on the unpartitioned model.
    leaves = [params[n] for n in trained]
    initial = {n: params[n].detach().clone() for n in trained}
    optimizer = step.make_optimizer(leaves)
    ref_losses, ref_grads = [], None
    for k in range(opts.steps):
        optimizer.zero_grad(set_to_none=True)
        out = ev.run(params, feeds)
        loss = step.loss(out, feeds, labels)
        loss.backward()
        ref_losses.append(loss.item())
        if k == 0:
            ref_grads = {n: (params[n].grad.detach().clone()
                             if params[n].grad is not None
                             else torch.zeros_like(params[n]))
                         for n in trained}
            # Parameters torch trains that the program does not.
            extra = [n for n, p in params.items()
                     if p.requires_grad and p.grad is not None
                     and n not in trained and p.grad.abs().max() > 0]
        optimizer.step()

    # The program, one run per step.
    work = opts.work
    report = Report(opts.rtol)
    weights = model_dir
    state = {}
    prog_grads = None
    for k in range(opts.steps):
        in_dir = os.path.join(work, 'step%d' % (k + 1), 'inputs')
        out_dir = os.path.join(work, 'step%d' % (k + 1), 'outputs')
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        for t in io['inputs']:
            src = os.path.join(opts.inputs, t['file'])
            dst = os.path.join(in_dir, t['file'])
            name = t['name']
            if name == 'adam_step':
                write_bin(dst, np.array(k + 1, dtype=np.float32), t['dtype'])
            elif name.startswith('adam_m:') or name.startswith('adam_v:'):
                if name in state:
                    write_bin(dst, state[name], t['dtype'])
                else:
                    write_bin(dst, np.zeros(t['shape']), t['dtype'])
            else:
                shutil.copyfile(src, dst)
        cmd = opts.program + ['--weights', weights, '--inputs', in_dir,
                              '--outputs', out_dir]
        sys.stderr.write('stpar-train-ref: [step %d] %s\n' %
                         (k + 1, ' '.join(cmd)))
        sys.stderr.flush()
        env = None
        err_path = os.path.join(work, 'step%d' % (k + 1), 'program.err.log')
        profiled = opts.profile and k + 1 == opts.steps
        if profiled:
            # The last step again with STPAR_PROFILE: per-op times.
            env = dict(os.environ, STPAR_PROFILE='1')
            err_path = os.path.join(work, 'profile.txt')
        rc, err_text = stpar_mpirun.run(cmd, err_path, 'stpar-train-ref',
                                        stdout=subprocess.DEVNULL, env=env)
        if not profiled:
            # The program's stderr (memory report, errors) is ours too.
            sys.stderr.write(err_text)
            sys.stderr.flush()
        if rc != 0:
            fail('step %d: the program failed (exit %d)' % (k + 1, rc))
        got = {n: read_bin(os.path.join(out_dir, t['file']), t['dtype'],
                           t['shape']) for n, t in outputs.items()}
        report.line('step %d loss (%.6f vs %.6f)' %
                    (k + 1, float(got['loss']), ref_losses[k]),
                    got['loss'], np.array(ref_losses[k]))
        if k == 0:
            prog_grads = {n[len('grad:'):]: v for n, v in got.items()
                          if n.startswith('grad:')}
        for n, v in got.items():
            if n.startswith('adam_m:') or n.startswith('adam_v:'):
                state[n] = v
        if k + 1 < opts.steps:
            # The next step reads the program's updated weights.
            weights = os.path.join(work, 'step%d' % (k + 2), 'weights')
            os.makedirs(weights, exist_ok=True)
            files = {p['file'] for p in io.get('parameters', [])}
            for f in files:
                shutil.copyfile(os.path.join(model_dir, f),
                                os.path.join(weights, f))
            for n in trained:
                p = param_table[n]
                with open(os.path.join(weights, p['file']), 'r+b') as fh:
                    fh.seek(p['offset'])
                    fh.write(np.ascontiguousarray(
                        got['param:' + n], dtype=DTYPES[p['dtype']]).tobytes())
        final = got

    # A tensor far smaller than the others (e.g. an attention key bias,
    # whose exact gradient is zero) is judged at the scale of the largest:
    # floor = rtol * 1e-3 * the largest reference magnitude of its kind.
    def largest(tensors):
        return max((float(t.abs().max()) for t in tensors if t.numel()),
                   default=0.0)
    grad_floor = opts.rtol * 1e-3 * largest(ref_grads.values())
    update_floor = opts.rtol * 1e-3 * largest(
        [params[n].detach() - initial[n] for n in trained])
    if prog_grads:
        for n in trained:
            report.line('step 1 grad %s' % n, prog_grads[n],
                        ref_grads[n].numpy(), floor=grad_floor)
    for n in trained:
        actual_w = final['param:' + n]
        ref_w = params[n].detach().numpy()
        w0 = initial[n].numpy()
        # Each step stores W in float32: the update carries up to one
        # rounding of W per step (2^-24 relative), whatever its size.
        ulp = 2.0 ** -24 * float(np.max(np.abs(w0))) if w0.size else 0.0
        floor = 2 * opts.steps * ulp + update_floor
        note = ''
        if opts.optimizer == 'adamw':
            # AdamW divides each element's step by its own gradient
            # magnitude, so the gradient error the check above allows
            # (rtol * max|g|) moves an element with a small gradient g_i by
            # up to lr * min(1, rtol * max|g| / (|g_i| + eps)) per step (an
            # exactly-zero gradient: any direction). That is the element's
            # tolerance on top of the others. Where the allowed error
            # exceeds the gradient itself the element's direction is noise,
            # and two updates differ by at most twice Adam's largest step,
            # lr * (1 - b1) / sqrt(1 - b2) when 1 - b1 > sqrt(1 - b2), else
            # lr (Kingma & Ba, ICLR'15, Sec. 2.1): the cap.
            g = np.abs(ref_grads[n].numpy())
            cap = 2.0 * max(1.0, (1.0 - opts.beta1) /
                            math.sqrt(1.0 - opts.beta2))
            sensitivity = np.minimum(
                cap, opts.rtol * largest(ref_grads.values()) / (g + opts.eps))
            floor = floor + opts.steps * opts.lr * sensitivity
            small = int((g + opts.eps <
                         1e-2 * largest(ref_grads.values())).sum())
            if small:
                note = ' (%d of %d with |g| < 1%% of max)' % (small, g.size)
        report.line('step %d param %s%s' % (opts.steps, n, note), actual_w,
                    ref_w, floor=floor)
        report.line('step %d update %s%s' % (opts.steps, n, note),
                    actual_w - w0, ref_w - w0, floor=floor)
    for n in extra:
        print('parameter %-48s trained by the reference, not by the '
              'program FAIL' % n)
        report.failed += 1
    if opts.profile:
        # Per-op times of the last step next to the plan (profile-vs-plan.py).
        print('profile of step %d (the program on this machine; the plan '
              'predicts its cluster):' % opts.steps)
        sys.stdout.flush()
        subprocess.call([sys.executable,
                         os.path.join(os.path.dirname(
                             os.path.abspath(__file__)), 'profile-vs-plan.py'),
                         os.path.join(work, 'profile.txt'), opts.profile,
                         '--top', '15'])
    print('summary: %d compared, %d passed, %d failed, worst error/tolerance '
          '%.3f (error = max|a-r| / max|r| per tensor, rtol %.1e; reference: '
          'PyTorch %s autograd in float64)' % (
              report.passed + report.failed, report.passed, report.failed,
              report.worst, opts.rtol, torch.__version__))
    return 0 if report.failed == 0 else 1


def selftest(opts):
    """The reference checks itself: forward vs ONNX Runtime, gradients vs
    central finite differences."""
    io = json.load(open(opts.io))
    model = onnx.load(opts.model, load_external_data=False)
    model_dir = os.path.dirname(os.path.abspath(opts.model))
    ev = Evaluator(model)
    params = load_params(model, model_dir)
    feeds = io_inputs(io, opts.inputs, set(ev.inputs))
    report = Report(opts.rtol)
    out = ev.run(params, feeds)
    if opts.forward_ref:
        for t in io['outputs']:
            if t['name'] in out:
                ref = read_bin(os.path.join(opts.forward_ref, t['file']),
                               t['dtype'], t['shape'])
                report.line('forward %s vs ONNX Runtime' % t['name'],
                            out[t['name']].detach().numpy(), ref)
    step = Step(ev, opts, io)
    loss = step.loss(out, feeds, None)
    loss.backward()
    rng = np.random.default_rng(opts.seed)
    candidates = sorted(n for n, p in params.items() if p.requires_grad
                        and p.grad is not None)
    if not candidates:
        fail('no parameter receives a gradient')
    # First, middle and last parameter by name (and more with --fd-params).
    k = max(1, opts.fd_params)
    picks_by_name = sorted({candidates[int(i * (len(candidates) - 1) /
                                           max(1, k - 1))] for i in range(k)})
    scale = max(float(params[n].grad.abs().max()) for n in candidates)
    # --fd-loss: differentiate another loss numerically (the test that a
    # wrong gradient is caught).
    fd_step = step
    if opts.fd_loss:
        fd_opts = argparse.Namespace(**vars(opts))
        fd_opts.loss = opts.fd_loss
        fd_step = Step(ev, fd_opts, io)
    h = 1e-6
    for n in picks_by_name:
        p = params[n]
        flat = p.detach().view(-1)
        picks = rng.choice(flat.numel(), size=min(4, flat.numel()),
                           replace=False)
        fd, ad = [], []
        for i in picks:
            with torch.no_grad():
                old = flat[i].item()
                flat[i] = old + h
                lp = fd_step.loss(ev.run(params, feeds), feeds, None).item()
                flat[i] = old - h
                lm = fd_step.loss(ev.run(params, feeds), feeds, None).item()
                flat[i] = old
            fd.append((lp - lm) / (2 * h))
            ad.append(p.grad.view(-1)[i].item())
        # Central differences in float64 are good to ~1e-9 of the loss.
        report.line('finite differences %s' % n, np.array(ad), np.array(fd),
                    floor=opts.rtol * 1e-3 * scale)
    print('summary: %d compared, %d passed, %d failed' %
          (report.passed + report.failed, report.passed, report.failed))
    return 0 if report.failed == 0 else 1


def main():
    argv = sys.argv[1:]
    program = []
    if '--' in argv:
        k = argv.index('--')
        program, argv = argv[k + 1:], argv[:k]
    ap = argparse.ArgumentParser(prog='stpar-train-ref.py')
    ap.add_argument('command', choices=['verify', 'selftest'])
    ap.add_argument('--model', required=True)
    ap.add_argument('--io', required=True)
    ap.add_argument('--inputs', required=True)
    ap.add_argument('--work')
    ap.add_argument('--steps', type=int, default=1)
    ap.add_argument('--loss', default='next-token')
    ap.add_argument('--loss-output', default='')
    ap.add_argument('--classes', type=int, default=0)
    ap.add_argument('--optimizer', default='sgd', choices=['sgd', 'adamw'])
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--weight-decay', type=float, default=0.0)
    ap.add_argument('--beta1', type=float, default=0.9)
    ap.add_argument('--beta2', type=float, default=0.999)
    ap.add_argument('--eps', type=float, default=1e-8)
    ap.add_argument('--rtol', type=float, default=1e-4)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--forward-ref')
    ap.add_argument('--fd-params', type=int, default=3)
    ap.add_argument('--fd-loss', default='')
    ap.add_argument('--profile', default='',
                    help='plan.json: run the last step with STPAR_PROFILE '
                         'and print per-op times next to the plan')
    opts = ap.parse_args(argv)
    opts.program = program
    torch.manual_seed(opts.seed)
    if opts.command == 'verify':
        if not program or not opts.work or opts.steps < 1:
            fail('verify needs --work, --steps >= 1 and the program after --')
        return verify(opts)
    return selftest(opts)


if __name__ == '__main__':
    sys.exit(main())
