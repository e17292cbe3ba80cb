# lib_cli.sh - helpers for the shell tests that drive the gputrain binary end to end.
set -u
BIN=${GT_BIN:?GT_BIN must point at the gputrain binary}
FAILS=0
# HANG_S: how long a run or a wait that should end soon may take before the test calls it hung. A
# limit says "it hangs", never "it is slow": it must hold a sanitizer build on a machine busy with
# other work (10-50x slower than a quiet one), and costs nothing where the run ends early.
HANG_S=300
TMP=$(mktemp -d /tmp/gt_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

find_data() {
    for d in "${GT_DATA:-}" "${GT_SOURCE_DIR:-.}/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist; do
        [ -n "$d" ] && [ -f "$d/t10k-labels-idx1-ubyte.gz" ] && { echo "$d"; return 0; }
    done
    return 1
}

# expect_error WANT_SUBSTRING... -- ARGS: exits nonzero, prints exactly one line on stderr
# containing every WANT_SUBSTRING, and nothing that looks like a crash; a run still going after
# EXPECT_TIMEOUT seconds (default HANG_S) fails.
expect_error() {
    local want=()
    while [ "$1" != "--" ]; do want+=("$1"); shift; done
    shift
    timeout -k 5 "${EXPECT_TIMEOUT:-$HANG_S}" "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    local lines
    lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then fail "gputrain $*: still running after ${EXPECT_TIMEOUT:-$HANG_S} s"; return; fi
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "gputrain $* exited $rc"; return; fi
    if [ "$lines" -ne 1 ]; then fail "gputrain $*: $lines lines on stderr: $(cat "$TMP/err")"; return; fi
    for w in "${want[@]}"; do
        grep -qF -- "$w" "$TMP/err" || fail "gputrain $*: message lacks '$w': $(cat "$TMP/err")"
    done
}

# expect_exit CODE -- ARGS: exits with CODE (within EXPECT_TIMEOUT seconds); output in $TMP/out, $TMP/err.
expect_exit() {
    local want=$1
    shift 2
    timeout -k 5 "${EXPECT_TIMEOUT:-$HANG_S}" "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    [ $rc -eq "$want" ] || fail "gputrain $*: exit $rc, expected $want: $(head -c 300 "$TMP/err")"
}

# wait_for SECONDS COMMAND...: until COMMAND succeeds, tried every 0.1 s; 1 after SECONDS of wall
# time (HANG_S where the test has no reason for less).
wait_for() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.1
    done
}

# logged LOG TYPE: LOG holds a record of TYPE (an "eval" once a run is really training).
logged() { grep -q "\"type\":\"$2\"" "$1" 2>/dev/null; }

finish() {
    if [ $FAILS -ne 0 ]; then echo "$FAILS failed"; exit 1; fi
    echo ok
    exit 0
}
