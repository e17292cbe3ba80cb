#!/usr/bin/env bash
# cli_hangup.sh - SIGHUP (a closed terminal) saves the checkpoint and exits 129 like SIGTERM; a
# closed stdout pipe (gputrain | head -n1) does not end the run: it trains to the end, writes
# its checkpoint and exits 0. Bounded by timeouts.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
COMMON=(--data "$DATA" --train-samples 400 --batch 16 --no-progress --gpus cpu:1)
gone() { ! kill -0 "$1" 2>/dev/null; }

"$BIN" "${COMMON[@]}" --epochs 100000 --checkpoint "$TMP/hup" --log "$TMP/hup.jsonl" >"$TMP/out" 2>&1 &
pid=$!
wait_for $HANG_S logged "$TMP/hup.jsonl" eval || fail "SIGHUP: no evaluation within $HANG_S s"
kill -HUP $pid
wait_for $HANG_S gone $pid
kill -KILL $pid 2>/dev/null && fail "SIGHUP: still running after $HANG_S s"
wait $pid
rc=$?
[ $rc -eq 129 ] || fail "SIGHUP: exit $rc, expected 129: $(cat "$TMP/out")"
[ -f "$TMP/hup" ] || fail "SIGHUP: no checkpoint written"
timeout $HANG_S "$BIN" eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/hup" >/dev/null 2>&1 ||
    fail "SIGHUP: the checkpoint does not evaluate"

# stdout closed after the first line: the run goes on to the end
( timeout $HANG_S "$BIN" "${COMMON[@]}" --epochs 2 --checkpoint "$TMP/pipe" 2>"$TMP/pipe.err"
  echo $? >"$TMP/pipe.rc" ) | head -n1 >/dev/null
[ "$(cat "$TMP/pipe.rc")" = 0 ] || fail "closed stdout: exit $(cat "$TMP/pipe.rc"): $(cat "$TMP/pipe.err")"
[ -f "$TMP/pipe" ] || fail "closed stdout: no checkpoint written"

finish
