#!/usr/bin/env bash
# cli_startup.sh - a run on CPU workers never brings CUDA up: the driver's start costs up to a
# second on a GPU host and buys such a run nothing. A stand-in for the driver's library leaves a
# mark when the CUDA runtime calls into it; a CPU run must leave none, while a run that looks for
# GPUs does (so the test can see a call).
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
"$BIN" --version | grep -q cuda || { echo "skipped: gputrain built without CUDA"; exit 77; }
command -v cc >/dev/null || { echo "skipped: no C compiler for the stand-in driver"; exit 77; }

mkdir -p "$TMP/driver"
cat >"$TMP/driver/fake.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
/* The runtime reaches the driver through these entry points; any call is a start. */
static int touched(void)
{
    const char *p = getenv("GT_FAKE_DRIVER_MARK");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f)
        fclose(f);
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
int cuInit(unsigned flags) { (void)flags; return touched(); }
int cuDriverGetVersion(int *v) { (void)v; return touched(); }
int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f)
{
    (void)s, (void)p, (void)v, (void)f;
    return touched();
}
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, void *st)
{
    (void)s, (void)p, (void)v, (void)f, (void)st;
    return touched();
}
C
cc -shared -fPIC -o "$TMP/driver/libcuda.so.1" "$TMP/driver/fake.c" || fail "cannot build the stand-in driver"
run_with_driver() { # MARK ARGS...
    local mark=$1
    shift
    LD_LIBRARY_PATH="$TMP/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GT_FAKE_DRIVER_MARK="$mark" \
        timeout -k 5 120 "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
}

run_with_driver "$TMP/cpu.mark" --data "$DATA" --gpus cpu:2 --epochs 1 --train-samples 640 --seed 1 \
    --checkpoint "$TMP/c.st" --no-progress || fail "cpu run exited $?: $(cat "$TMP/err")"
[ -e "$TMP/cpu.mark" ] && fail "a run on CPU workers loaded the CUDA driver"
run_with_driver "$TMP/eval.mark" eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/c.st" ||
    fail "cpu eval exited $?: $(cat "$TMP/err")"
[ -e "$TMP/eval.mark" ] && fail "eval on a CPU worker called the CUDA driver"

# The control: looking for GPUs calls it (the stand-in has none, so the run takes the CPU).
run_with_driver "$TMP/gpu.mark" --data "$DATA" --epochs 1 --train-samples 640 --seed 1 --no-progress
[ -e "$TMP/gpu.mark" ] || fail "the stand-in driver was never called: the test cannot see a call"

finish
