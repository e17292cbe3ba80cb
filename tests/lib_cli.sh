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
# containing every WANT_SUBSTRING, and nothing that looks like a crash.
expect_error() {
    local want=()
    while [ "$1" != "--" ]; do want+=("$1"); shift; done
    shift
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    local lines
    lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "gputrain $* exited $rc"; return; fi
    if [ "$lines" -ne 1 ]; then fail "gputrain $*: $lines lines on stderr: $(cat "$TMP/err")"; return; fi
    for w in "${want[@]}"; do
        grep -qF -- "$w" "$TMP/err" || fail "gputrain $*: message lacks '$w': $(cat "$TMP/err")"
    done
}

finish() {
    if [ $FAILS -ne 0 ]; then echo "$FAILS failed"; exit 1; fi
    echo ok
    exit 0
}
