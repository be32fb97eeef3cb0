#!/usr/bin/python3
"""One step composition: `stpar cost`, `stpar plan --compare` and the
search benchmark give the same step time for the same plan.

usage:
  agree.py onnx STPAR MODEL.onnx BATCH SEQ CLUSTER [--perturb]
      runs `stpar plan MODEL --compare` (global batch BATCH) and costs each
      Megatron row's configuration with `stpar cost MODEL` (the bound batch
      dim is the micro-batch size there: BATCH / (dp m), gb=BATCH)
  agree.py gpt STPAR BENCH-SEARCH NAME DEVICES GPTSPEC CLUSTER [--perturb]
      runs `stpar-bench-search --only NAME --devices DEVICES` and costs its
      Megatron plan with `stpar cost --model GPTSPEC`
With --perturb the configuration is changed (recomputation toggled) before
costing: the times must then differ (the check can fail). Prints one line
per plan, `same` or `differs`, and exits 1 on any mismatch.
"""
import json
import re
import subprocess
import sys


def strategy(label):
    """`tp=4 pp=1 dp=2 m=1 [zero-1] [vp=2] [recompute[=selective]] [sp]
    [overlap=0]` (the plan labels of Search.cpp) -> (keys, m, dp)."""
    keys = dict(re.findall(r"\b(tp|pp|dp|m|vp)=(\d+)", label))
    rc = re.search(r"\brecompute(=selective)?\b", label)
    rc = "none" if not rc else "selective" if rc.group(1) else "full"
    if perturb:
        rc = "full" if rc == "none" else "none"
    z = re.search(r"zero-(\d)", label)
    parts = [f"tp={keys['tp']}", f"pp={keys['pp']}", f"dp={keys['dp']}",
             f"vp={keys.get('vp', 1)}", f"zero={z.group(1) if z else 0}",
             f"recompute={rc}",
             "sp=" + ("1" if re.search(r"\bsp\b", label) else "0"),
             "overlap=" + ("0" if "overlap=0" in label else "1")]
    return ",".join(parts), int(keys["m"]), int(keys["dp"])


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def compare(name, printed, cost_json):
    step = json.loads(cost_json)["step_s"] * 1e3
    digits = len(printed.split(".")[1])
    same = abs(step - float(printed)) <= 0.5 * 10 ** -digits + 1e-9
    print(f"{name}: {'same' if same else 'differs'} (printed {printed} ms, "
          f"stpar cost {step:.6f} ms)")
    return same


perturb = "--perturb" in sys.argv
args = [a for a in sys.argv[1:] if a != "--perturb"]
results = []
if args[0] == "onnx":
    stpar, model, batch, seq, cluster = args[1:6]
    out = run([stpar, "plan", model, f"--dim=batch_size={batch}",
               f"--dim=seq_len={seq}", "--cluster", cluster, "--compare"])
    for line in out.splitlines():
        # megatron (best grid)   1.746   1.156   0.026  tp=4 pp=1 dp=2 m=1
        m = re.match(r"\s+(megatron.*?)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+(tp=.*)",
                     line)
        if not m:
            continue
        keys, micro, dp = strategy(m.group(3))
        mb = int(batch) // (dp * micro)
        cost = run([stpar, "cost", model, f"--dim=batch_size={mb}",
                    f"--dim=seq_len={seq}", "--cluster", cluster, "--strategy",
                    f"megatron:{keys},gb={batch}", "--json"])
        results.append(compare(f"plan --compare '{m.group(1)}' megatron:{keys}",
                               m.group(2), cost))
elif args[0] == "gpt":
    stpar, bench, name, devices, spec, cluster = args[1:7]
    out = run([bench, "--only", name, "--devices", devices])
    for line in out.splitlines():
        m = re.search(r"; megatron (tp=[^;]*);", line)
        if not m:
            continue
        keys, micro, dp = strategy(m.group(1))
        batch = int(re.search(r"batch=(\d+)", spec).group(1))
        mb = batch // (dp * micro)
        cost = run([stpar, "cost", "--model", spec, "--cluster", cluster,
                    "--strategy", f"megatron:{keys},mb={mb}", "--json"])
        results.append(compare(f"benchmark {name} megatron:{keys}",
                               line.split()[5], cost))
if not results:
    print("error: no Megatron row found")
    sys.exit(1)
sys.exit(0 if all(results) else 1)
