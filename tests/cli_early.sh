#!/usr/bin/env bash
# cli_early.sh - a validation split and early stopping: --val-split holds out part of the training
# set and evaluates it beside the test set (val_loss, val_acc on the terminal and in the log);
# --save-best writes the state of the best monitored accuracy (validation's) where eval finds the
# test accuracy the log gave at that step; --patience N stops after N evaluations without a
# better one, says so in the done: line and the log, and saves the state it stopped at; a resumed
# run goes on from the best its checkpoint recorded. Bad values and clashing paths are refused
# (exit 2).
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --no-progress --train-samples 2560 --batch 16 --model mlp --gpus cpu:2 --mode sync)

# 20% of 2560 held out: 2048 train; val figures on every evaluation; the best saved
expect_exit 0 -- "${RUN[@]}" --epochs 2 --eval-every 40 --val-split 0.2 --save-best "$TMP/best.st" \
    --log "$TMP/v.jsonl"
grep -q "^gputrain: mlp .* 2048 train / 10000 test samples" "$TMP/out" || fail "header: $(head -1 "$TMP/out")"
[ "$(grep -c '^epoch .*  val loss [0-9.]* acc [0-9.]*  test loss' "$TMP/out")" -eq 5 ] ||
    fail "terminal lines: $(grep '^epoch' "$TMP/out")"
[ "$(grep '"type":"eval"' "$TMP/v.jsonl" | grep -c '"val_loss":[0-9.]*,"val_acc":[0-9.]*')" -eq 5 ] ||
    fail "eval records lack val_loss/val_acc: $(grep '"type":"eval"' "$TMP/v.jsonl" | head -1)"
grep -q '"train_samples":2048,' "$TMP/v.jsonl" || fail "config record's train_samples"
grep -q "^done: .*, val acc [0-9.]*, test acc [0-9.]* (ema 0.999)$" "$TMP/out" || fail "done line: $(grep '^done' "$TMP/out")"
read -r best_step best_test <<<"$(python3 - "$TMP/v.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l]
best = None
for r in ev:
    if best is None or r["val_acc"] > best["val_acc"]:
        best = r
print(best["step"], "%.4f" % best["test_acc"])
PY
)"
grep -q "^best: $TMP/best.st (val acc [0-9.]* at step $best_step)$" "$TMP/out" || fail "best line (step $best_step): $(cat "$TMP/out")"
grep -q '"stopped_early":false,"best_acc":[0-9.]*,"best_step":'"$best_step"',' "$TMP/v.jsonl" || fail "summary's best"
expect_exit 0 -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/best.st"
grep -q "acc $best_test" "$TMP/out" || fail "eval of the best checkpoint: $(cat "$TMP/out"), the log had $best_test at step $best_step"

# --patience 2 at a learning rate that changes nothing: the first evaluation stays the best, two
# more end the run, which saves where it stopped (before the next evaluation was due)
expect_exit 0 -- "${RUN[@]}" --epochs 5 --lr 1e-30 --eval-every 10 --val-split 0.2 --patience 2 \
    --checkpoint "$TMP/last.st" --log "$TMP/p.jsonl"
[ "$(grep -c '"type":"eval"' "$TMP/p.jsonl")" -eq 3 ] || fail "patience: $(grep -c '"type":"eval"' "$TMP/p.jsonl") evaluations"
grep -q "^done: .*; stopped early: no better val acc in 2 evaluations (best [0-9.]* at step 10)$" "$TMP/out" ||
    fail "patience: done line: $(grep '^done' "$TMP/out")"
grep -q '"event":"stopped_early",.*"evaluations":2,"best_step":10,' "$TMP/p.jsonl" || fail "no stopped_early record"
s=$(grep '"checkpoint_written"' "$TMP/p.jsonl" | tail -1 | grep -o '"step":[0-9]*' | cut -d: -f2)
[ -n "$s" ] && [ "$s" -gt 30 ] && [ "$s" -le 40 ] || fail "patience: saved at step '$s', not in 31..40"
# the test set is monitored without a split
expect_exit 0 -- "${RUN[@]}" --epochs 5 --lr 1e-30 --eval-every 10 --patience 1 --log "$TMP/t.jsonl"
grep -q "stopped early: no better test acc in 1 evaluations (best [0-9.]* at step 10)$" "$TMP/out" ||
    fail "patience without a split: $(grep '^done' "$TMP/out")"
! grep -q '"val_acc"' "$TMP/t.jsonl" || fail "val_acc logged without a split"

# A resumed run goes on from its best evaluation: at a rate that changes nothing every evaluation
# ties the first (step 10), so the resumed run finds no better one, leaves --save-best's file as
# it was and counts --patience on: 6 evaluations without a better one by the end of epoch 1
# (steps 20-60 and 64), 4 more (70-100) stop it.
expect_exit 0 -- "${RUN[@]}" --epochs 1 --lr 1e-30 --eval-every 10 --val-split 0.2 --patience 10 \
    --save-best "$TMP/rb.st" --checkpoint "$TMP/rc.st"
cp "$TMP/rb.st" "$TMP/rb0.st"
expect_exit 0 -- "${RUN[@]}" --epochs 2 --lr 1e-30 --eval-every 10 --val-split 0.2 --patience 10 \
    --save-best "$TMP/rb.st" --resume "$TMP/rc.st" --log "$TMP/rr.jsonl"
grep -q '^best:' "$TMP/out" && fail "resumed: a tie replaced the best: $(grep '^best' "$TMP/out")"
cmp -s "$TMP/rb.st" "$TMP/rb0.st" || fail "resumed: --save-best's file was rewritten"
grep -q "^done: .*; stopped early: no better val acc in 10 evaluations (best [0-9.]* at step 10)$" "$TMP/out" ||
    fail "resumed: patience did not count on: $(grep '^done' "$TMP/out")"
[ "$(grep -c '"type":"eval"' "$TMP/rr.jsonl")" -eq 4 ] || fail "resumed: $(grep -c '"type":"eval"' "$TMP/rr.jsonl") evaluations, not 4"

# refusals: a split that leaves a side empty, the best and the latest in one file, a resume on
# another split
expect_exit 2 -- "${RUN[@]}" --val-split 0.0001
grep -q "^gputrain: --val-split 0.0001: holds out 0 of the 2560 training samples; leave at least one on each side" "$TMP/err" ||
    fail "an empty split: $(cat "$TMP/err")"
expect_error "--save-best and --checkpoint" "$TMP/same.st" -- "${RUN[@]}" --checkpoint "$TMP/same.st" --save-best "$TMP/same.st"
expect_error "--log and --save-best" -- "${RUN[@]}" --log "$TMP/same.st" --save-best "$TMP/same.st"
expect_error "--save-best and --checkpoint --keep" "$TMP/c.st.2" -- "${RUN[@]}" --checkpoint "$TMP/c.st" --keep 2 \
    --save-best "$TMP/c.st.2"
expect_error "--save-best and --resume" "refusing to overwrite an input" -- "${RUN[@]}" --resume "$TMP/best.st" \
    --checkpoint "$TMP/other.st" --save-best "$TMP/best.st"
expect_exit 0 -- "${RUN[@]}" --epochs 1 --val-split 0.2 --checkpoint "$TMP/r.st"
expect_exit 2 -- "${RUN[@]}" --epochs 2 --val-split 0.1 --resume "$TMP/r.st"
grep -q "^gputrain: --val-split 0.1: .* was trained on 2048 training samples, this run on 2304 (256 held out)" "$TMP/err" ||
    fail "resume on another split: $(cat "$TMP/err")"
expect_exit 0 -- "${RUN[@]}" --epochs 2 --val-split 0.2 --resume "$TMP/r.st"

[ "$FAILS" -eq 0 ] || exit 1
echo "cli_early: ok"
