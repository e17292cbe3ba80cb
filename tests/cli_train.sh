#!/usr/bin/env bash
# cli_train.sh - the command line end to end on CPU workers: a short run learns and logs,
# checkpoints evaluate to the accuracy the run reported, --init starts from given weights, and
# --resume continues exactly (per-step losses bit for bit) from an epoch end and from mid-epoch.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
COMMON=(--data "$DATA" --train-samples 1200 --batch 32 --no-progress)
# Sanitizer builds (GT_QUICK=1) are 10-50x slower: fewer samples there, same checks. The short
# hogwild run's accuracy depends on how its two workers interleave: 0.49-0.57 in release (0.35
# leaves 5 standard deviations), 0.33-0.48 on 600 samples (so 0.2, where 0.25 left 3).
CKEVERY=25s LEARNS=0.35
if [ "${GT_QUICK:-0}" = 1 ]; then
    COMMON=(--data "$DATA" --train-samples 600 --batch 32 --no-progress)
    CKEVERY=10s LEARNS=0.2
fi

# A short hogwild run on two workers learns, prints its epochs and writes a JSONL log.
"$BIN" "${COMMON[@]}" --gpus cpu:2 --epochs 2 --optimizer adam --lr 2e-3 --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1 || fail "short run failed: $(cat "$TMP/a.out")"
grep -q '^epoch   2' "$TMP/a.out" || fail "no epoch line: $(cat "$TMP/a.out")"
grep -q 'staleness max' "$TMP/a.out" || fail "no telemetry summary"
for key in epoch step samples wall_s train_loss test_loss test_acc mode workers; do
    grep '"type":"eval"' "$TMP/a.jsonl" | head -1 | grep -q "\"$key\":" || fail "log lacks $key"
done
[ "$(grep -c '"type":"eval"' "$TMP/a.jsonl")" -eq 2 ] || fail "expected 2 evaluations in the log"
acc=$(grep '"type":"eval"' "$TMP/a.jsonl" | tail -1 | sed 's/.*"test_acc":\([0-9.]*\).*/\1/')
awk -v a="$acc" -v need="$LEARNS" 'BEGIN { exit !(a > need) }' || fail "2 epochs reached only $acc (chance is 0.1)"

steps() { grep '"type":"step"' "$1" | sed 's/,"worker":[0-9]*//; s/,"wall_s":[0-9.]*//'; }
final_acc() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"test_acc":\([0-9.]*\).*/\1/'; }

# Exact resume, sync on one worker, cosine schedule with momentum (state must come back too).
for opt in "--lr 0.05 --momentum 0.9 --schedule cosine" "--optimizer adam --lr 1e-3 --schedule cosine"; do
    rm -f "$TMP"/ck* "$TMP"/*.jsonl
    # shellcheck disable=SC2086
    "$BIN" "${COMMON[@]}" --gpus cpu:1 --mode sync --epochs 3 $opt --checkpoint "$TMP/ck.safetensors" \
        --checkpoint-every 1 --keep 3 --log "$TMP/straight.jsonl" --log-steps >/dev/null 2>&1 || fail "straight run failed ($opt)"
    [ -f "$TMP/ck.safetensors.2" ] || fail "--keep 3 did not keep the epoch-1 checkpoint"
    # shellcheck disable=SC2086
    "$BIN" "${COMMON[@]}" --gpus cpu:1 --mode sync --epochs 3 $opt --resume "$TMP/ck.safetensors.2" \
        --log "$TMP/resumed.jsonl" --log-steps >"$TMP/r.out" 2>&1 || fail "resumed run failed ($opt): $(cat "$TMP/r.out")"
    grep -q 'resuming' "$TMP/r.out" || fail "resume not announced"
    diff <(steps "$TMP/straight.jsonl" | grep -v '"epoch":1,') <(steps "$TMP/resumed.jsonl") >/dev/null ||
        fail "resume from an epoch end changed the per-step losses ($opt)"
    [ "$(final_acc "$TMP/straight.jsonl")" = "$(final_acc "$TMP/resumed.jsonl")" ] || fail "resume changed the final accuracy ($opt)"
    # eval of the final checkpoint gives the accuracy the run reported
    "$BIN" eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/ck.safetensors" >"$TMP/e.out" 2>&1 || fail "eval failed: $(cat "$TMP/e.out")"
    grep -q "acc $(final_acc "$TMP/straight.jsonl" | cut -c1-6)" "$TMP/e.out" || fail "eval disagrees: $(cat "$TMP/e.out") vs $(final_acc "$TMP/straight.jsonl")"
done

# Exact resume from the middle of an epoch (a step checkpoint).
rm -f "$TMP"/ck* "$TMP"/*.jsonl
"$BIN" "${COMMON[@]}" --gpus cpu:1 --mode sync --epochs 2 --checkpoint "$TMP/ck.safetensors" --checkpoint-every "$CKEVERY" \
    --keep 5 --log "$TMP/straight.jsonl" --log-steps >/dev/null 2>&1 || fail "step-checkpoint run failed"
"$BIN" "${COMMON[@]}" --gpus cpu:1 --mode sync --epochs 2 --resume "$TMP/ck.safetensors.2" \
    --log "$TMP/resumed.jsonl" --log-steps >"$TMP/r.out" 2>&1 || fail "mid-epoch resume failed: $(cat "$TMP/r.out")"
first=$(steps "$TMP/resumed.jsonl" | head -1)
tail_straight=$(steps "$TMP/straight.jsonl" | sed -n "/$(echo "$first" | sed 's/"loss".*//')/,\$p")
[ -n "$first" ] && [ "$tail_straight" = "$(steps "$TMP/resumed.jsonl")" ] || fail "mid-epoch resume changed the per-step losses"

# hogwild --overlap: a mid-epoch checkpoint holds the batches pushed, not those still in flight,
# so the resumed run trains each of the epoch's remaining batches once. (Without the moving
# average, so that the --init check below compares the training parameters, which --init takes.)
rm -f "$TMP"/ck* "$TMP"/*.jsonl
"$BIN" "${COMMON[@]}" --gpus cpu:1 --overlap --ema 0 --epochs 2 --checkpoint "$TMP/ck.safetensors" --checkpoint-every "$CKEVERY" \
    --keep 5 --log "$TMP/straight.jsonl" --log-steps >/dev/null 2>&1 || fail "overlap step-checkpoint run failed"
"$BIN" "${COMMON[@]}" --gpus cpu:1 --overlap --epochs 2 --resume "$TMP/ck.safetensors.2" \
    --log "$TMP/resumed.jsonl" --log-steps >"$TMP/r.out" 2>&1 || fail "overlap mid-epoch resume failed: $(cat "$TMP/r.out")"
ep=$(($(sed -n 's/.*resuming .* at step [0-9]* ([0-9]* steps into epoch \([0-9]*\);.*/\1/p' "$TMP/r.out") - 1))
at=$(sed -n 's/.*resuming .* at step [0-9]* (\([0-9]*\) steps into epoch.*/\1/p' "$TMP/r.out")
per_epoch=$(grep -c '"type":"step","worker":0,"epoch":1,' "$TMP/straight.jsonl")
rest=$(grep -c "\"type\":\"step\",\"worker\":0,\"epoch\":$((ep + 1))," "$TMP/resumed.jsonl")
[ -n "$at" ] && [ "$at" -gt 0 ] && [ $((at + rest)) -eq "$per_epoch" ] ||
    fail "overlap resume at epoch '$ep' step '$at' trained $rest of the epoch's $per_epoch batches"

# --init starts from the given weights: at a vanishing learning rate the accuracy stays.
"$BIN" "${COMMON[@]}" --gpus cpu:1 --mode sync --epochs 1 --lr 1e-30 --ema 0 --init "$TMP/ck.safetensors" \
    --log "$TMP/init.jsonl" >/dev/null 2>&1 || fail "--init run failed"
[ "$(final_acc "$TMP/init.jsonl")" = "$(final_acc "$TMP/straight.jsonl")" ] || fail "--init did not start from the checkpoint"

# A checkpoint of another model is refused by --init and --resume, naming the file.
expect_error "ck.safetensors" "model" -- "${COMMON[@]}" --gpus cpu:1 --model mlp --epochs 1 --init "$TMP/ck.safetensors"
expect_error "ck.safetensors" -- "${COMMON[@]}" --gpus cpu:1 --optimizer adam --epochs 1 --resume "$TMP/ck.safetensors"

# A run too short for the guard to watch a stall's length of steps gets no verdict or advice, only
# a note that it ended at chance (10 updates here).
"$BIN" --data "$DATA" --seed 1 --no-progress --gpus cpu:2 --train-samples 640 --epochs 1 --lr 1e-30 \
    >"$TMP/short.out" 2>"$TMP/short.err" || fail "short run at chance exited $?: $(cat "$TMP/short.err")"
grep -q 'stalled\|lower --lr' "$TMP/short.err" && fail "short run judged: $(cat "$TMP/short.err")"
grep -q 'note: the run ended at chance accuracy .* too few for the guard to judge' "$TMP/short.err" ||
    fail "short run at chance not noted: $(cat "$TMP/short.err")"

# Residual blocks, strided and bias-free convolutions and global average pooling run on the CPU
# backend (batch norm: cli_batchnorm.sh).
RES='conv:8:3:1:2 relu res[ conv:8:3:1:1:nobias relu conv:8:3:1:1 ] relu res[ conv:16:3:1:2 relu conv:16:3:1:1 | conv:16:1:0:2 ] relu gap fc:10'
"$BIN" --data "$DATA" --seed 1 --no-progress --gpus cpu:2 --train-samples 1024 --epochs 1 --model "$RES" \
    --checkpoint "$TMP/res.st" >"$TMP/res.out" 2>&1 || fail "residual model exited $?: $(cat "$TMP/res.out")"
grep -q "^done: hogwild, 2 workers" "$TMP/res.out" || fail "residual model: $(cat "$TMP/res.out")"
"$BIN" predict --checkpoint "$TMP/res.st" --data "$DATA" test:0-3 >"$TMP/res.pred" 2>&1 ||
    fail "predict on the residual model: $(cat "$TMP/res.pred")"

finish
