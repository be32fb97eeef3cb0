# stpar_mpirun.py - runs an emitted program under mpirun, once more when
# the launcher failed although no rank reported an error.
#
# Part of stpar. The rule is stpar verify's run phase (launcherFault in
# tools/stpar/VerifyCommand.cpp, which says more): Open MPI 4's launcher
# has races of its own (two mpiruns creating the session directory at once;
# a rank that finished normally reported as "exiting improperly" with
# PID 0, open-mpi/ompi#7833). A run whose stderr has an `error:` line
# (every fatal error of an emitted program prints `stpar_program: error:
# ...`), an MPI error handler's report or a rank killed by a signal is not
# run again, nor one that mpirun did not exit from (killed by a signal).

import os
import subprocess
import sys


def launcher_fault(stderr_text):
    """Whether a failed run's stderr shows no failure of a rank's own."""
    return ('error:' not in stderr_text and
            'An error occurred in MPI_' not in stderr_text and
            'exited on signal' not in stderr_text)


def run(cmd, stderr_path, tag, **kwargs):
    """Runs `cmd` with its stderr in the file `stderr_path` (and, without
    `stdout` in kwargs, its stdout inherited); returns (exit code, stderr
    text). On a launcher fault it says so on our stderr, prefixed with
    `tag`, and runs `cmd` once more (the first stderr kept as
    `stderr_path`.1)."""
    for attempt in (1, 2):
        with open(stderr_path, 'w') as err:
            rc = subprocess.call(cmd, stderr=err, **kwargs)
        with open(stderr_path, errors='replace') as err:
            text = err.read()
        if rc <= 0 or attempt == 2 or not launcher_fault(text):
            return rc, text
        last = ''.join('    %s\n' % line
                       for line in text.rstrip().splitlines()[-12:])
        sys.stderr.write(
            '%s: warning: %s failed (exit %d) but no rank reported an '
            'error; running it once more (Open MPI 4\'s launcher has '
            'races: concurrent session directories, open-mpi/ompi#7833). '
            'Its stderr ended with:\n%s' % (tag, cmd[0], rc, last))
        sys.stderr.flush()
        os.replace(stderr_path, stderr_path + '.1')
