#!/usr/bin/env bash
# mpirun.sh - runs gputrain on several hosts under mpirun with what Open MPI needs for it:
# --bind-to none (a process's workers are threads, which Open MPI would pin to one core) and, run
# as root (uid 0), --allow-run-as-root, without which Open MPI refuses to start anything ("mpirun
# has detected an attempt to run as root"). Other launchers (MPICH's, MPIRUN=...) get the
# arguments as given. An option already on the line is not added twice.
#
# Usage: bash tools/mpirun.sh [--print] MPIRUN-ARGS...
#   e.g. bash tools/mpirun.sh -np 2 -H a,b ./build/gputrain --gpus 0,1,2,3 --mode allreduce
# --print prints the command instead of running it. mpirun's own long options go after its first
# argument (-np N), or after a lone --: a first argument of --something is taken as this script's.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
gt_prog=mpirun.sh
print=0
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --print) print=1; shift ;;
        --) shift; break ;;
        --*) usage_error "unknown option '$1' (mpirun's own options go after -np N or after --)" ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || usage_error "name what to run, e.g. -np 2 -H a,b ./build/gputrain"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null ||
    die "no '$mpirun' here (Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev; MPIRUN=... names another)"
launch=("$mpirun")
if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    has() { local a; for a in "${@:2}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
    has --bind-to "$@" || launch+=(--bind-to none)
    [ "$(id -u)" -eq 0 ] && ! has --allow-run-as-root "$@" && launch+=(--allow-run-as-root)
fi
launch+=("$@")
if [ $print = 1 ]; then
    printf '%q ' "${launch[@]}" | sed 's/ $//'
    echo
    exit 0
fi
exec "${launch[@]}"
