"""Prints the live peak of intermediates of two partitioned modules
(`stp.arena`'s live_peak, set by -stp-plan-memory) and whether the second
is lower: "live peak of intermediates: off A bytes, on B bytes: lower"
(or "not lower")."""
import re
import sys


def peak(path):
    m = re.search(r"live_peak = (\d+)", open(path).read())
    if not m:
        sys.exit(f"{path}: no stp.arena live_peak")
    return int(m.group(1))


off, on = peak(sys.argv[1]), peak(sys.argv[2])
print(f"live peak of intermediates: off {off} bytes, on {on} bytes: "
      + ("lower" if on < off else "not lower"))
