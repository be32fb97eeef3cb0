#!/usr/bin/env python3
"""compare-arena.py RUN.ERR PLAN.JSON PARTITIONED.MLIR: the arena the
emitted program reported (its stderr line) against the memory plan in the
IR (stp.arena) and the plan's predicted activation + transient memory per
device. Prints the figures, the ratio, and "checks ok" or the failed check
(exit 1)."""
import json
import re
import sys


def main():
    err, plan_path, mlir = sys.argv[1:4]
    m = re.search(r"arena (\d+) bytes per rank \(arguments (\d+), "
                  r"intermediates' live peak (\d+)\), (\d+) bytes used",
                  open(err).read())
    if not m:
        print("error: no arena line in the program's stderr")
        return 1
    arena, arguments, live_peak, used = map(int, m.groups())
    ir = re.search(r"stp.arena = \{arena = (\d+) : i64, arguments = (\d+) : "
                   r"i64, buffers = (\d+) : i64, live_peak = (\d+) : i64\}",
                   open(mlir).read())
    if not ir:
        print("error: no stp.arena in the partitioned IR")
        return 1
    ir_arena, ir_arguments, buffers, ir_peak = map(int, ir.groups())
    memory = json.load(open(plan_path))["memory"]
    predicted = memory["activations"] + memory["transient"]
    intermediates = arena - arguments
    print(f"arena {arena} bytes per rank: arguments {arguments}, "
          f"intermediates {intermediates} (live peak {live_peak}, "
          f"all buffers without reuse {buffers})")
    print(f"plan: activations {memory['activations']:.0f} + transient "
          f"{memory['transient']:.0f} = {predicted:.0f} bytes per device")
    print(f"ratio intermediates / plan {intermediates / predicted:.2f}")
    checks = [
        (arena == ir_arena and arguments == ir_arguments and
         live_peak == ir_peak, "the program's figures are the IR's"),
        (used == arena, "the run used the whole arena"),
        (arena >= arguments + live_peak, "the arena holds the live peak"),
        (arena < buffers, "buffers share memory"),
    ]
    for ok, what in checks:
        if not ok:
            print(f"error: {what}: no")
            return 1
    print("checks ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
