#!/usr/bin/env python3
"""Builds one CUDA program as `NVCC ARGS... SOURCE -o OUT` would, in two
steps so that ccache, when installed, caches the compile (it cannot cache a
command that also links):

    nvcc-program.py NVCC [ARGS...] SOURCE.cu -o OUT

1. [ccache] NVCC ARGS -c SOURCE -o OUT.o   (every argument but the linker's)
2. NVCC ARGS' OUT.o -o OUT                 (-arch and the linker's: -L, -l, -Wl,)

lit's %nvcc-program (test/lit.cfg.py) expands to this script and the nvcc
command with its flags. Exits with the first failing step's status."""
import os
import shutil
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or "-o" not in argv[1:]:
        sys.stderr.write("usage: nvcc-program.py NVCC [ARGS...] SOURCE -o OUT\n")
        return 2
    nvcc, rest = argv[0], argv[1:]
    out = rest[rest.index("-o") + 1]
    del rest[rest.index("-o"):rest.index("-o") + 2]
    sources = [a for a in rest if a.endswith((".cu", ".cpp"))]
    if len(sources) != 1:
        sys.stderr.write("nvcc-program.py: expected one source, got %s\n" % sources)
        return 2
    is_link = lambda a: a.startswith(("-L", "-l", "-Wl,"))
    compile_args = [a for a in rest if a not in sources and not is_link(a)]
    link_args = [a for a in rest if is_link(a) or a.startswith("-arch")]
    obj = out + ".o"
    ccache = shutil.which("ccache")
    steps = [([ccache] if ccache else []) + [nvcc] + compile_args +
             ["-c", sources[0], "-o", obj],
             [nvcc, obj, "-o", out] + link_args]
    for cmd in steps:
        rc = subprocess.call(cmd)
        if rc != 0:
            return rc
    os.remove(obj)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
