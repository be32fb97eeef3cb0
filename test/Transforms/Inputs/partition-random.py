"""Random planned modules for -stp-partition: chains of elementwise ops,
linear layers and LayerNorm/RMSNorm on a 2x2x2 mesh, each op with a random spec (mesh axes on
random loops, reduction loops included, several axes per loop) or, for a
linear layer, PrimePar's temporal primitive on two random axes (the third
axis optionally splitting the batch). Consecutive specs disagree, so the
re-layouts between them (all-gather, all-slice, all-to-all, all-reduce,
reduce-scatter) are exercised; Inputs/spmd-sim.py checks the numbers.

usage: partition-random.py COUNT   (modules for seeds 1..COUNT on stdout,
       separated by "// -----")
"""
import random
import sys

AX = ["x0", "x1", "x2"]
# Batch, sequence, hidden and FFN sizes.
B, S, H, F = 4, 8, 16, 8


def rand_split(names, exts):
    """Each mesh axis (size 2), in random order, splits a random loop
    with probability 0.6 where the extent stays divisible."""
    axes = AX[:]
    random.shuffle(axes)
    out = {n: [] for n in names}
    for a in axes:
        if random.random() < 0.6:
            n = random.choice(names)
            if exts[n] % (2 ** (len(out[n]) + 1)) == 0:
                out[n].append(a)
    return out


def loops(names, exts, split, red=()):
    parts = []
    for n in names:
        s = f'"{n}" = {exts[n]}'
        if n in red:
            s += " reduction"
        if split[n]:
            s += " {" + ", ".join(f'"{a}"' for a in split[n]) + "}"
        parts.append(s)
    return "[" + ", ".join(parts) + "]"

hdr = '''#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
#mesh = #stp.mesh<#cl, ["pp" = 1, "x0" = 2, "x1" = 2, "x2" = 2]>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#mi = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#mw = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#mo = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module attributes {stp.mesh = #mesh} {
  func.func @main(%x: tensor<4x8x16xf32>, %w1: tensor<16x8xf32>, %w2: tensor<8x16xf32>,
                  %g1: tensor<16xf32>, %b1: tensor<16xf32>, %g2: tensor<8xf32>, %b2: tensor<8xf32>) -> tensor<4x8x16xf32> {
    %cst = arith.constant 0.0 : f32
'''


def generate(seed):
    random.seed(seed)
    body = []
    cur, curH, n = "%x", H, 0
    for step in range(6):
        kind = random.choice(["ew", "ew", "mm", "mm", "norm"])
        n += 1
        if kind == "norm":
            ex = {"b": B, "s": S, "d": curH}
            sp = rand_split(["b", "s", "d"], ex)
            g, b = ("%g1", "%b1") if curH == H else ("%g2", "%b2")
            spec = f'stp.spec = #stp.spec<#mesh, loops = {loops(["b", "s", "d"], ex, sp, red=("d",))}>'
            t = f"tensor<4x8x{curH}xf32>"
            p = f"tensor<{curH}xf32>"
            if random.random() < 0.5:
                body.append(f"    %v{n} = stp.rms_norm {cur}, {g} {{axis = 2 : i64, epsilon = 1.0e-5 : f32, {spec}}} : ({t}, {p}) -> {t}")
            else:
                body.append(f"    %v{n} = stp.layer_norm {cur}, {g}, {b} {{axis = 2 : i64, epsilon = 1.0e-5 : f32, {spec}}} : ({t}, {p}, {p}) -> {t}")
        elif kind == "ew":
            ex = {"b": B, "s": S, "d": curH}
            sp = rand_split(["b", "s", "d"], ex)
            body.append(f'''    %e{n} = tensor.empty() : tensor<4x8x{curH}xf32>
        %v{n} = linalg.generic {{indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}}
          ins({cur} : tensor<4x8x{curH}xf32>) outs(%e{n} : tensor<4x8x{curH}xf32>)
          attrs = {{stp.spec = #stp.spec<#mesh, loops = {loops(["b","s","d"], ex, sp)}>}} {{
        ^bb0(%a: f32, %o: f32):
          %t = math.tanh %a : f32
          linalg.yield %t : f32
        }} -> tensor<4x8x{curH}xf32>''')
        else:
            outH = F if curH == H else H
            w = "%w1" if curH == H else "%w2"
            ex = {"b": B, "s": S, "k": outH, "n": curH}
            temporal = random.random() < 0.4
            if temporal:
                grid = random.sample(AX, 2)
                rest = [a for a in AX if a not in grid]
                sp = {"b": [], "s": [], "k": [], "n": []}
                if random.random() < 0.5:
                    sp["b"] = rest
                spec = f'loops = {loops(["b","s","k","n"], ex, sp, red=("n",))}, temporal = <grid = ["{grid[0]}", "{grid[1]}"], matmul = ["s", "n", "k"], steps = 2>'
            else:
                sp = rand_split(["b", "s", "k", "n"], ex)
                spec = f'loops = {loops(["b","s","k","n"], ex, sp, red=("n",))}'
            body.append(f'''    %e{n} = tensor.empty() : tensor<4x8x{outH}xf32>
        %z{n} = linalg.fill ins(%cst : f32) outs(%e{n} : tensor<4x8x{outH}xf32>) -> tensor<4x8x{outH}xf32>
        %v{n} = linalg.generic {{indexing_maps = [#mi, #mw, #mo], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
          ins({cur}, {w} : tensor<4x8x{curH}xf32>, tensor<{curH}x{outH}xf32>) outs(%z{n} : tensor<4x8x{outH}xf32>)
          attrs = {{stp.spec = #stp.spec<#mesh, {spec}>}} {{
        ^bb0(%a: f32, %b: f32, %acc: f32):
          %m = arith.mulf %a, %b : f32
          %s = arith.addf %acc, %m : f32
          linalg.yield %s : f32
        }} -> tensor<4x8x{outH}xf32>''')
            curH = outH
        cur = f"%v{n}"
    if curH != H:
        n += 1
        body.append(f'''    %e{n} = tensor.empty() : tensor<4x8x16xf32>
        %z{n} = linalg.fill ins(%cst : f32) outs(%e{n} : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
        %v{n} = linalg.generic {{indexing_maps = [#mi, #mw, #mo], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}}
          ins({cur}, %w2 : tensor<4x8x8xf32>, tensor<8x16xf32>) outs(%z{n} : tensor<4x8x16xf32>) {{
        ^bb0(%a: f32, %b: f32, %acc: f32):
          %m = arith.mulf %a, %b : f32
          %s = arith.addf %acc, %m : f32
          linalg.yield %s : f32
        }} -> tensor<4x8x16xf32>''')
        cur = f"%v{n}"
    return hdr + "\n".join(body) + f"\n    return {cur} : tensor<4x8x16xf32>\n  }}\n}}"


print("\n// -----\n".join(generate(seed)
                            for seed in range(1, int(sys.argv[1]) + 1)))
