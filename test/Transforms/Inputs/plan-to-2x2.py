"""Rewrites the IR `stpar plan --devices 4 --emit-mlir` writes for a 1-D
mesh ["pp" = 1, "x0" = 4] into a 2x2 mesh ["pp" = 1, "x0" = 2, "x1" = 2]
(every split over x0 becomes a split over x0, x1) and puts PrimePar's
temporal primitive on every linear layer (a linalg.generic with three
parallel loops and one reduction loop reading a 2-D weight), so that
-stp-partition sees temporal specs on real model IR.

usage: plan-to-2x2.py IN.mlir OUT.mlir
"""
import re
import sys

LOOP = re.compile(r'"(\w+)" = (\d+)( reduction)?( \{[^}]*\})?')
SPEC = re.compile(r'#stp\.spec<#mesh, loops = \[([^\]]*)\]>')
LINEAR = re.compile(
    r'iterator_types = \["parallel", "parallel", "parallel", "reduction"\]\} '
    r'ins\(%[\w]+, %[\w]+ : tensor<[^>]*>, tensor<\d+x\d+xf32>\)')


def temporal_spec(match):
    loops = LOOP.findall(match.group(1))
    if len(loops) != 4 or not loops[3][2]:
        return None
    names = [name for name, _, _, _ in loops]
    extents = [int(extent) for _, extent, _, _ in loops]
    if any(e % 2 for e in extents[1:]):
        return None
    text = ", ".join(
        f'"{n}" = {e}' + (" reduction" if i == 3 else "")
        for i, (n, e) in enumerate(zip(names, extents)))
    return (f'#stp.spec<#mesh, loops = [{text}], temporal = <grid = '
            f'["x0", "x1"], matmul = ["{names[1]}", "{names[3]}", '
            f'"{names[2]}"], steps = 2>>')


def main():
    text = open(sys.argv[1]).read()
    text = text.replace('["pp" = 1, "x0" = 4]', '["pp" = 1, "x0" = 2, "x1" = 2]')
    text = text.replace('{"x0"}', '{"x0", "x1"}')
    lines = []
    for line in text.split("\n"):
        spec = SPEC.search(line)
        if spec and LINEAR.search(line):
            new = temporal_spec(spec)
            if new:
                line = line.replace(spec.group(0), new)
        lines.append(line)
    open(sys.argv[2], "w").write("\n".join(lines))


main()
