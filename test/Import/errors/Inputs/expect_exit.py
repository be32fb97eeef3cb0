#!/usr/bin/python3
"""Usage: expect_exit.py CODE COMMAND [ARG ...]

Runs COMMAND, passes its stdout and stderr through (stderr to stdout, so one
FileCheck sees both) and exits 0 exactly when COMMAND exited with CODE.
Unlike `not`, a crash (a signal, an abort from a sanitizer) or any other
exit code fails the test.
"""

import subprocess
import sys


def main():
    expected = int(sys.argv[1])
    proc = subprocess.run(sys.argv[2:], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    sys.stdout.buffer.write(proc.stdout)
    sys.stdout.flush()
    if proc.returncode != expected:
        how = (f"was killed by signal {-proc.returncode}"
               if proc.returncode < 0 else f"exited with {proc.returncode}")
        print(f"expect_exit.py: {sys.argv[2]} {how}, expected exit code "
              f"{expected}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
