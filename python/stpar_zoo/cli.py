"""Command line of stpar-zoo: list, generate, inspect, params."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time

import onnx

from . import check
from .archs import build_model
from . import weights
from .presets import ARCHS, CUSTOM_DEFAULTS, PRESETS, Config

_SIZE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq",
               "experts", "top_k")


def _fmt_params(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f}B"


def cmd_list(args) -> int:
    hdr = ("name", "arch", "layers", "hidden", "heads", "kv", "ffn", "vocab",
           "seq", "experts", "published")
    rows = []
    for name, c in PRESETS.items():
        moe = f"{c.experts}/top-{c.top_k}" if c.experts else "-"
        rows.append((name, c.arch, c.layers, c.hidden, c.heads, c.kv_heads,
                     c.ffn, c.vocab, c.seq, moe,
                     _fmt_params(c.published_params)))
    widths = [max(len(str(r[i])) for r in rows + [hdr])
              for i in range(len(hdr))]
    for r in [hdr] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    print("\nsources:")
    for name, c in PRESETS.items():
        print(f"  {name}: {c.source}")
    print(f"\ncustom: --arch {{{'|'.join(ARCHS)}}} with any sizes "
          f"(defaults {CUSTOM_DEFAULTS})")
    return 0


def config_from_args(args) -> Config:
    if args.name == "custom":
        if not args.arch:
            raise ValueError("custom needs --arch "
                             f"{{{'|'.join(ARCHS)}}}")
        base = dict(CUSTOM_DEFAULTS)
        if args.arch == "mixtral":
            base.update(experts=4, top_k=2)
        c = Config(args.arch, tied=args.arch not in ("llama", "mixtral"),
                   **base)
    elif args.name in PRESETS:
        c = dataclasses.replace(PRESETS[args.name])
        if args.arch and args.arch != c.arch:
            raise ValueError(f"--arch {args.arch} contradicts preset "
                             f"{args.name} ({c.arch})")
    else:
        raise ValueError(f"unknown model '{args.name}' (see 'list')")
    overridden = False
    for f in _SIZE_FLAGS:
        v = getattr(args, f)
        if v is not None:
            setattr(c, f, v)
            overridden = True
    if args.heads is not None and args.kv_heads is None and \
            (args.name == "custom" or c.arch not in ("llama", "mixtral")):
        # Multi-head attention unless --kv-heads says otherwise (a preset
        # with grouped-query attention keeps its kv-heads).
        c.kv_heads = c.heads
    if overridden:
        # A changed size is no longer the published model.
        c.published_params = None
        c.source = ""
    c.validate()
    return c


def cmd_generate(args) -> int:
    c = config_from_args(args)
    out = args.output
    data = os.path.basename(out) + ".data"
    t0 = time.perf_counter()
    model = build_model(c, args.name, data)
    t1 = time.perf_counter()
    if args.check:
        check.check_model(model)
    t2 = time.perf_counter()
    onnx.save(model, out)
    written = "not written"
    if args.weights == "random":
        path = os.path.join(os.path.dirname(os.path.abspath(out)), data)
        try:
            size = weights.write_random(model, path, args.seed)
        except ValueError as e:
            os.remove(out)
            print(f"stpar-zoo: error: {e}", file=sys.stderr)
            return 1
        written = f"written: {size} bytes, seed {args.seed}"
    t3 = time.perf_counter()
    params = int(next(p.value for p in model.metadata_props
                      if p.key == "stpar_zoo.parameters"))
    print(f"wrote {out}: {len(model.graph.node)} nodes, "
          f"{len(model.graph.initializer)} initializers, "
          f"{params} parameters, {os.path.getsize(out)} bytes; "
          f"weights external in {data} ({written})")
    if args.timing:
        print(f"timing: build {t1 - t0:.2f}s, check {t2 - t1:.2f}s, "
              f"save {t3 - t2:.2f}s", file=sys.stderr)
    return 0


def cmd_inspect(args) -> int:
    try:
        summary = check.summary(args.file)
    except OSError as e:
        print(f"stpar-zoo: error: {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def cmd_selftest(args) -> int:
    from .evaluate import selftest
    lines = selftest(args.file, batch=args.batch, seq=args.seq)
    print("\n".join(lines))
    return 1 if any(l.startswith("FAIL") for l in lines) else 0


def cmd_params(args) -> int:
    """Builds each preset's graph in memory, sums its parameter tensors and
    compares with the published count; optionally cross-checks the GPT
    presets against Megatron's published table (CSV)."""
    import numpy as np
    failures = 0
    names = args.names or list(PRESETS)
    for name in names:
        c = dataclasses.replace(PRESETS[name])
        model = build_model(c, name, name + ".onnx.data")
        count = int(np.sum([np.prod(np.array(t.dims, dtype=np.int64),
                                    dtype=np.int64)
                            for t in model.graph.initializer
                            if not t.doc_string.startswith("buffer")],
                           dtype=np.int64))
        err = (count - c.published_params) / c.published_params
        ok = abs(err) <= args.tolerance
        failures += not ok
        print(f"{'OK' if ok else 'MISMATCH'} {name}: {count} parameters, "
              f"published {c.published_params:.4g} ({100 * err:+.2f}%)")
    if args.megatron_csv:
        with open(args.megatron_csv) as f:
            rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
        for r in rows:
            name = "gpt3-" + r["model"].lower()
            c = PRESETS.get(name)
            if c is None:
                print(f"MISSING preset for CSV row {r['model']}")
                failures += 1
                continue
            want = (int(r["layers"]), int(r["hidden"]), int(r["heads"]),
                    float(r["params_b"]) * 1e9)
            have = (c.layers, c.hidden, c.heads, c.published_params)
            ok = want[:3] == have[:3] and abs(want[3] - have[3]) < 1e6
            failures += not ok
            print(f"{'OK' if ok else 'MISMATCH'} csv {r['model']} -> {name}: "
                  f"layers {c.layers} hidden {c.hidden} heads {c.heads}")
    return 1 if failures else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="stpar-zoo",
        description="Graph-only ONNX models (weights external and absent) of "
                    "published transformer configurations.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="print the presets and their sources")
    g = sub.add_parser("generate", help="write a graph-only ONNX file")
    g.add_argument("name", help="a preset from 'list', or 'custom'")
    g.add_argument("-o", "--output", required=True)
    g.add_argument("--arch", choices=ARCHS, help="architecture (custom)")
    for f in _SIZE_FLAGS:
        g.add_argument("--" + f.replace("_", "-"), type=int, dest=f)
    g.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the ONNX checker and shape inference")
    g.add_argument("--timing", action="store_true",
                   help="print build/check/save times to stderr")
    g.add_argument("--weights", choices=["none", "random"], default="none",
                   help="none: graph only (default); random: also write the "
                        "external data file with seeded random weights (and "
                        "the real causal-mask and rotary buffers), for "
                        "models up to 1 GiB of weights, so that stpar "
                        "compile/verify can run them")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of --weights random (default 0)")
    i = sub.add_parser("inspect", help="summarize an ONNX file")
    i.add_argument("file")
    st = sub.add_parser("selftest", help="run a tiny model on random "
                        "weights (numpy) and check causality/padding/gates")
    st.add_argument("file")
    st.add_argument("--batch", type=int, default=2)
    st.add_argument("--seq", type=int, help="default: the model's seq")
    pp = sub.add_parser("params", help="parameter counts vs published")
    pp.add_argument("names", nargs="*", choices=[[]] + list(PRESETS),
                    metavar="NAME")
    pp.add_argument("--tolerance", type=float, default=0.03)
    pp.add_argument("--megatron-csv",
                    help="cross-check the gpt3-* presets against this CSV")
    args = p.parse_args(argv)
    try:
        return {"list": cmd_list, "generate": cmd_generate,
                "inspect": cmd_inspect, "params": cmd_params,
                "selftest": cmd_selftest}[args.cmd](args)
    except ValueError as e:
        print(f"stpar-zoo: error: {e}", file=sys.stderr)
        return 2
