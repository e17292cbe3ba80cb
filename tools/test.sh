#!/usr/bin/env bash
# test.sh - install what is missing, build, and run every test: the normal build (with CUDA when a
# toolkit is present; GPU tests report skipped without a GPU; with MPI, so tests/cli_mpi.sh runs
# two processes under mpirun) and its `cmake --install`, the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the store, mode and checkpoint tests under ThreadSanitizer.
#
# Usage: bash tools/test.sh      (no options)
set -euo pipefail
case "${1:-}" in
    "") ;;
    --help) sed -n '2,/^set /p' "$0" | sed -e '/^set /d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
. tools/deps.sh
gt_install_deps
jobs=$(nproc)

echo "== build and test (release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_MPI=ON >/dev/null
cmake --build build -j"$jobs" >/dev/null
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== cmake --install puts bin/gputrain under the prefix"
prefix=$(mktemp -d)
cmake --install build --prefix "$prefix" >/dev/null
"$prefix/bin/gputrain" --version
rm -rf "$prefix"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGT_CUDA=OFF -DGT_SANITIZE=address >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
GT_QUICK=1 ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== ThreadSanitizer (store, workers, modes, faults)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGT_CUDA=OFF -DGT_SANITIZE=thread >/dev/null
cmake --build build-tsan -j"$jobs" >/dev/null
GT_QUICK=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" -R 'test_ps|test_modes|cli_signals'
