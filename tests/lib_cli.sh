# lib_cli.sh - helpers for the shell tests that drive the gputrain binary end to end.
set -u
BIN=${GT_BIN:?GT_BIN must point at the gputrain binary}
FAILS=0
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
# EXPECT_TIMEOUT seconds (default 120) fails.
expect_error() {
    local want=()
    while [ "$1" != "--" ]; do want+=("$1"); shift; done
    shift
    timeout -k 5 "${EXPECT_TIMEOUT:-120}" "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    local lines
    lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then fail "gputrain $*: still running after ${EXPECT_TIMEOUT:-120} s"; return; fi
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
    timeout -k 5 "${EXPECT_TIMEOUT:-120}" "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$?
    [ $rc -eq "$want" ] || fail "gputrain $*: exit $rc, expected $want: $(head -c 300 "$TMP/err")"
}

finish() {
    if [ $FAILS -ne 0 ]; then echo "$FAILS failed"; exit 1; fi
    echo ok
    exit 0
}
