#!/usr/bin/env bash
# cli_converge.sh - more workers still train with the default recipe: every mode at 2 and 4 CPU
# workers learns (the recipe's corrections, printed and logged), --literal and explicit flags are
# left alone, and a run at --lr 1.0 shows the guard's event and either recovers or stops nonzero.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
# 12000 samples, 2 epochs (374 hogwild updates): a run that did not train sits at 0.10; the
# slowest modes with corrections reach 0.28-0.7 this early (docs/convergence-notes.md), so the
# floor says "it trains", with a margin.
BASE=(--data "$DATA" --seed 1 --no-progress)
COMMON=("${BASE[@]}" --train-samples 12000 --epochs 2)
SMALL=("${BASE[@]}" --train-samples 640 --epochs 1)
FLOOR=${GT_CONVERGE_FLOOR:-0.2}
# hogwild --overlap at 4 workers learns slowest (momentum 0.23 and two steps in flight a worker):
# on a loaded 2-core machine this short run has ended anywhere from 0.12 to 0.7. For the
# asynchronous modes the test holds what the product promises: a run is either off chance (the
# guard's definition: more than 2 points above 1/C) or says `stalled`; that they reach the
# benchmark's accuracies is measured by tools/bench.sh, not here.
ASYNC_FLOOR=${GT_CONVERGE_ASYNC_FLOOR:-0.1201}
if [ "${GT_QUICK:-0}" = 1 ]; then echo "skipped: too slow for sanitizer builds"; exit 77; fi

acc_of() { sed -n 's/^done:.*test acc \([0-9.]*\).*/\1/p' "$1"; }
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }

# Every mode at 2 and 4 workers, default flags.
MODES=("" "--stripes 0" "--overlap" "--mode sync" "--mode ssp --staleness 2"
       "--mode ssp --staleness 4" "--mode local --sync-every 4")
for w in 2 4; do
    for m in "${MODES[@]}"; do
        # shellcheck disable=SC2086
        "$BIN" "${COMMON[@]}" --gpus cpu:$w $m >"$TMP/o" 2>"$TMP/e" || { fail "cpu:$w $m exited $?: $(cat "$TMP/e")"; continue; }
        acc=$(acc_of "$TMP/o")
        at_least "$acc" "$FLOOR" && continue
        case "$m" in *sync*|*local*) ;; *) at_least "$acc" "$ASYNC_FLOOR" && continue ;; esac
        # The asynchronous modes depend on thread timing: on a loaded 2-core machine hogwild
        # --overlap once ended this short run at chance (it trains in 2 full epochs). What must
        # hold for them is that a run never ends at chance silently; sync and local must learn.
        case "$m" in
        *sync*|*local*) ;;
        *) grep -Eq 'stalled|ended at chance' "$TMP/e" && continue ;;
        esac
        fail "cpu:$w $m: test acc '$acc' below $FLOOR: $(cat "$TMP/o" "$TMP/e")"
    done
done

# The corrections are printed and logged; --literal and an explicit --momentum keep the recipe.
"$BIN" "${SMALL[@]}" --gpus cpu:4 --log "$TMP/r.jsonl" >"$TMP/o" 2>&1
grep -q '^recipe: hogwild x4: momentum 0.9 -> 0.3' "$TMP/o" || fail "no recipe line: $(cat "$TMP/o")"
grep -q '"type":"recipe","change":"hogwild x4: momentum 0.9 -> 0.3' "$TMP/r.jsonl" || fail "recipe not logged"
grep -q '"momentum":0.3' "$TMP/r.jsonl" || fail "summary does not show the corrected momentum"
for extra in "--literal" "--momentum 0.9"; do
    # shellcheck disable=SC2086
    "$BIN" "${SMALL[@]}" --gpus cpu:4 $extra --log "$TMP/l.jsonl" >"$TMP/o" 2>&1
    grep -q '^recipe:' "$TMP/o" && fail "$extra: recipe changed: $(cat "$TMP/o")"
    grep -q '"momentum":0.9' "$TMP/l.jsonl" || fail "$extra: momentum is not 0.9"
done
"$BIN" "${SMALL[@]}" --gpus cpu:1 >"$TMP/o" 2>&1
grep -q '^recipe:' "$TMP/o" && fail "one worker: recipe changed: $(cat "$TMP/o")"

# --lr 1.0: --on-diverge stop ends the run nonzero with one line that says what happened.
expect_error "--on-diverge stop" -- "${COMMON[@]}" --gpus cpu:2 --lr 1.0 --on-diverge stop --log "$TMP/s.jsonl"
grep -Eq 'diverged|stalled' "$TMP/err" || fail "stop: no diverged/stalled line: $(cat "$TMP/err")"
grep -Eq '"type":"(diverged|stalled)"' "$TMP/s.jsonl" || fail "stop: no event in the log"

# --lr 1.0, default --on-diverge recover: the event is shown and logged, and the run recovers.
"$BIN" "${BASE[@]}" --epochs 2 --train-samples 24000 --gpus cpu:1 --lr 1.0 --log "$TMP/g.jsonl" >"$TMP/o" 2>"$TMP/e"
rc=$?
grep -Eq '(diverged|stalled) at update .*rolled back' "$TMP/e" || fail "recover: no event line: $(cat "$TMP/e")"
grep -Eq '"type":"(diverged|stalled)".*"action":"rolled back' "$TMP/g.jsonl" || fail "recover: no event in the log"
acc=$(acc_of "$TMP/o")
[ $rc -ne 0 ] || at_least "$acc" 0.5 || fail "recover: exit 0 at test acc '$acc' (< 0.5)"

# The same in sync, whose workers compute on the store in place: the guard rolls back between
# clocks, and the run learns at the lowered step size.
"$BIN" "${BASE[@]}" --epochs 4 --train-samples 24000 --gpus cpu:2 --mode sync --lr 1.0 --log "$TMP/y.jsonl" >"$TMP/o" 2>"$TMP/e"
rc=$?
grep -Eq '(diverged|stalled) at update .*rolled back' "$TMP/e" || fail "sync recover: no event line: $(cat "$TMP/e")"
grep -Eq '"type":"(diverged|stalled)".*"action":"rolled back' "$TMP/y.jsonl" || fail "sync recover: no event in the log"
acc=$(acc_of "$TMP/o")
[ $rc -ne 0 ] || at_least "$acc" 0.5 || fail "sync recover: exit 0 at test acc '$acc' (< 0.5)"
finish
