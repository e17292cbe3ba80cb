#!/usr/bin/env bash
# cli_resume.sh - what --resume keeps and refuses, and command-line errors found late: a resume
# keeps the checkpoint's seed (another --seed is refused, exit 2); a finished run says there is
# nothing to train and exits 0; local mode warns that its resume is approximate; a step past the
# resumed layout's epoch warns that the epoch restarts, a step at its end goes on with the next
# epoch; allreduce on CPU workers and hex or non-finite numbers in flags and specs are
# command-line errors (exit 2).
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --train-samples 200 --no-progress)
ONE=(--gpus cpu:1)

expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 1 --seed 7 --checkpoint "$TMP/ck"
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --seed 1 --resume "$TMP/ck"
grep -q -- "--seed 1: .* was trained with --seed 7" "$TMP/err" || fail "other seed: $(cat "$TMP/err")"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --resume "$TMP/ck"
grep -q "seed 7" "$TMP/out" || fail "resume does not say it keeps seed 7: $(cat "$TMP/out")"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --seed 7 --resume "$TMP/ck"

# a finished run: nothing trained, exit 0
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 1 --resume "$TMP/ck"
grep -q "nothing to train: the checkpoint $TMP/ck is at epoch 1 of 1" "$TMP/out" ||
    fail "finished run: $(cat "$TMP/out")"
grep -q "^done:" "$TMP/out" && fail "finished run trained: $(cat "$TMP/out")"

# local mode's resume is approximate, and says so
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode local --epochs 1 --checkpoint "$TMP/local"
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode local --epochs 2 --resume "$TMP/local"
grep -q "warning: --mode local resumes approximately" "$TMP/err" || fail "local resume: no warning"

# a checkpoint taken mid-epoch (step 10 of 12 at --batch 16), resumed with a layout whose epoch
# has fewer steps: one warning line and an event record say the epoch restarts from its first batch
MID=(--batch 16 --epochs 1 --checkpoint-every 10s --keep 1)
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" "${MID[@]}" --checkpoint "$TMP/mid"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 32 --epochs 1 --resume "$TMP/mid.1" --log "$TMP/mid.jsonl"
grep -q "^gputrain: warning: --resume: the checkpoint is at step 10 of its epoch, past this run's 6 steps per epoch .*; epoch 1 restarts from its first batch$" "$TMP/err" ||
    fail "resume past the epoch (--batch): $(cat "$TMP/err")"
grep -q '^{"type":"event","event":"resume_restarts_epoch",.*"epoch":0,"step":10,"steps_per_epoch":6}$' "$TMP/mid.jsonl" ||
    fail "resume past the epoch: no event record: $(grep event "$TMP/mid.jsonl")"
expect_exit 0 -- "${RUN[@]}" --gpus cpu:1 --mode sync "${MID[@]}" --checkpoint "$TMP/midsync"
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode sync --batch 16 --epochs 1 --resume "$TMP/midsync.1"
grep -q "warning: --resume: the checkpoint is at step 10 of its epoch, past this run's 6 steps" "$TMP/err" ||
    fail "resume past the epoch (--gpus, sync): $(cat "$TMP/err")"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 1 --resume "$TMP/mid.1"
grep -q "restarts" "$TMP/err" && fail "resume in the same layout warns: $(cat "$TMP/err")"

# a step checkpoint at an epoch's last step (12 of 12) resumes at the next epoch's start, with no
# warning, and ends where the uninterrupted run ended
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 2 --checkpoint-every 12s --keep 2 --checkpoint "$TMP/end"
whole=$(grep '^epoch   2 ' "$TMP/out" | sed 's/ *[0-9]* samples\/s.*//')
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 2 --resume "$TMP/end.2"
grep -q "resuming $TMP/end.2 at epoch 0 step 12 " "$TMP/out" || fail "end of epoch: not the checkpoint at step 12: $(cat "$TMP/out")"
[ -n "$whole" ] && [ "$(grep '^epoch   2 ' "$TMP/out" | sed 's/ *[0-9]* samples\/s.*//')" = "$whole" ] ||
    fail "resumed at an epoch's end: $(grep '^epoch' "$TMP/out"), uninterrupted: $whole"
grep -q "warning" "$TMP/err" && fail "resumed at an epoch's end: $(cat "$TMP/err")"

# command-line errors exit 2
expect_exit 2 -- "${RUN[@]}" --mode allreduce --gpus cpu:2
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --lr 0x1p-4
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --lr inf
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --weight-decay nan
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --model "conv:6:5 relu dropout:0x1p-3 fc:10"
grep -q "dropout:0x1p-3" "$TMP/err" || fail "hex dropout: $(cat "$TMP/err")"

finish
