#!/usr/bin/env bash
# An MPI job where shared memory is short (as in a container, whose /dev/shm is 64 MiB by
# default) runs anyway: the MPI backend sees too little room for its shared-memory windows,
# warns once, and falls back to messages; OpenMPI alone would abort the job.
#   small_shm_test.sh TOUR MPIEXEC [MPIEXEC ARGS...]
# Mounts a 6 MiB tmpfs as OpenMPI's window backing directory; exits 77 (skipped) where
# mounting is not allowed.
set -u
tour=$1
shift
dir=$(mktemp -d)
if ! mount -t tmpfs -o size=6m tmpfs "$dir" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here"
  rmdir "$dir"
  exit 77
fi
trap 'umount "$dir"; rmdir "$dir"' EXIT
out=$(OMPI_MCA_osc_sm_backing_directory=$dir "$@" -x OMPI_MCA_osc_sm_backing_directory "$tour" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ]; then
  echo "FAIL: the job exited with $rc"
  exit 1
fi
if ! grep -q "shared memory: $dir has .* doing without" <<<"$out"; then
  echo "FAIL: no warning about the shared memory"
  exit 1
fi
echo "PASS"
