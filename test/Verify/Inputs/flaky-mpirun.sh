#!/bin/sh
# An mpirun that fails once the way Open MPI 4.1's does when another mpirun
# creates the session directory at the same moment (seen on this machine),
# then runs the real one: the first call creates the file $FLAKY_MPIRUN_STATE.
if [ ! -e "$FLAKY_MPIRUN_STATE" ]; then
  touch "$FLAKY_MPIRUN_STATE"
  cat >&2 <<'MSG'
--------------------------------------------------------------------------
A call to mkdir was unable to create the desired directory:

  Directory: /tmp/ompi.vm.0
  Error:     File exists
--------------------------------------------------------------------------
[vm:04505] [[32103,0],0] ORTE_ERROR_LOG: Error in file ../../../orte/util/session_dir.c at line 107
It looks like orte_init failed for some reason; your parallel process is
likely to abort.
MSG
  exit 1
fi
exec mpirun "$@"
