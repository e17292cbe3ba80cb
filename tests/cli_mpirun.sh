#!/usr/bin/env bash
# cli_mpirun.sh - the documented launcher line works as root: Open MPI's mpirun refuses root
# without --allow-run-as-root, and tools/mpirun.sh adds it (uid 0 only) with --bind-to none, each
# once; two processes start and print gputrain's version. As another user (setpriv, where root
# may switch) the flag is left out. Skipped (77) without Open MPI's mpirun.
. "$(dirname "$0")/lib_cli.sh"
SRC=${GT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
LAUNCH=(bash "$SRC/tools/mpirun.sh")
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 77; }
mpirun --version 2>&1 | grep -q "Open MPI" || { echo "skipped: mpirun is not Open MPI's"; exit 77; }
# the environment's permission would hide what the launcher does
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM

"${LAUNCH[@]}" --print -np 2 "$BIN" --version >"$TMP/cmd" || fail "--print: exit $?"
if [ "$(id -u)" -eq 0 ]; then
    [ "$(cat "$TMP/cmd")" = "mpirun --bind-to none --allow-run-as-root -np 2 $BIN --version" ] ||
        fail "as root: $(cat "$TMP/cmd")"
    # plain mpirun is refused as root, the launcher's line runs
    timeout $HANG_S mpirun -np 1 "$BIN" --version >"$TMP/plain" 2>&1
    grep -q "run as root" "$TMP/plain" || echo "note: this Open MPI starts as root without the flag"
    timeout $HANG_S "${LAUNCH[@]}" -np 2 --oversubscribe "$BIN" --version >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c '^gputrain [0-9]' "$TMP/out")" -eq 2 ] ||
        fail "as root: exit $rc: $(cat "$TMP/out" "$TMP/err" | head -5)"
    # given already, not twice; another --bind-to kept
    "${LAUNCH[@]}" --print -np 2 --allow-run-as-root --bind-to core "$BIN" >"$TMP/cmd"
    [ "$(cat "$TMP/cmd")" = "mpirun -np 2 --allow-run-as-root --bind-to core $BIN" ] || fail "given flags: $(cat "$TMP/cmd")"
    if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "${LAUNCH[@]}" --print -np 2 "$BIN" >"$TMP/cmd"
        [ "$(cat "$TMP/cmd")" = "mpirun --bind-to none -np 2 $BIN" ] || fail "as uid 65534: $(cat "$TMP/cmd")"
    fi
else
    [ "$(cat "$TMP/cmd")" = "mpirun --bind-to none -np 2 $BIN --version" ] || fail "as uid $(id -u): $(cat "$TMP/cmd")"
fi
# its own options: a bad one and a missing command are command-line errors
"${LAUNCH[@]}" --oversubscribe -np 2 "$BIN" >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "after -np N or after --" "$TMP/err" || fail "an mpirun option first: $(cat "$TMP/err")"
"${LAUNCH[@]}" --print -- --oversubscribe -np 2 "$BIN" >"$TMP/cmd" || fail "after --: exit $?"
grep -q -- "--oversubscribe -np 2 $BIN\$" "$TMP/cmd" || fail "after --: $(cat "$TMP/cmd")"
"${LAUNCH[@]}" >/dev/null 2>&1
[ $? -eq 2 ] || fail "nothing to run: not exit 2"

[ "$FAILS" -eq 0 ] || exit 1
echo "cli_mpirun: ok"
