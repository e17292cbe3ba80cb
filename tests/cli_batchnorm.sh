#!/bin/bash
# cli_batchnorm.sh - batch norm end to end on the CPU backend: a small residual network with batch
# norm trains in every mode, its running statistics reach the checkpoint (eval of the file gives
# the run's own last accuracy), a resume goes on from them, and resnet20 learns on a few thousand
# samples.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: no Fashion-MNIST"; exit 77; }
QUICK=${GT_QUICK:-0}
NET='conv:8:3:1:2:nobias bn relu res[ conv:8:3:1:1:nobias bn relu conv:8:3:1:1:nobias bn ] relu res[ conv:16:3:1:2:nobias bn relu conv:16:3:1:1:nobias bn | conv:16:1:0:2:nobias bn ] relu gap fc:10'
COMMON=(--data "$DATA" --seed 1 --no-progress --gpus cpu:2 --model "$NET" --batch 32)
SAMPLES=1024
[ "$QUICK" = 1 ] && SAMPLES=256

# The accuracy a run printed last, and the one `eval` gives for its checkpoint.
run_acc() { sed -n 's/^done: .* test acc \([0-9.]*\).*/\1/p' "$1"; }
eval_acc() { sed -n 's/.* acc \([0-9.]*\) (.*/\1/p' "$1"; }

for mode in hogwild lock-free sync ssp local; do
    extra=()
    [ "$mode" = lock-free ] && extra=(--stripes 0) && mode=hogwild
    out="$TMP/$mode${extra[*]:+-lf}.out" ck="$TMP/$mode${extra[*]:+-lf}.st"
    timeout -k 5 "$HANG_S" "$BIN" "${COMMON[@]}" --mode "$mode" "${extra[@]}" --train-samples "$SAMPLES" \
        --epochs 1 --checkpoint "$ck" >"$out" 2>&1 || { fail "$mode ${extra[*]} exited $?: $(cat "$out")"; continue; }
    acc=$(run_acc "$out")
    [ -n "$acc" ] || { fail "$mode ${extra[*]}: no done line: $(cat "$out")"; continue; }
    "$BIN" eval --checkpoint "$ck" --data "$DATA" --gpus cpu:1 >"$TMP/eval.out" 2>&1 ||
        { fail "eval of $mode's checkpoint exited $?: $(cat "$TMP/eval.out")"; continue; }
    # Evaluation normalises with the running statistics, which the file must hold as the run had
    # them: the same accuracy to the last digit.
    [ "$(eval_acc "$TMP/eval.out")" = "$acc" ] ||
        fail "$mode ${extra[*]}: eval of the checkpoint gives $(eval_acc "$TMP/eval.out"), the run $acc"
done

# Running statistics moved: the file's stem running variance is no longer all ones, and its count
# is the steps folded in (32 a worker in sync: both workers' batches).
if python3 -c 'import numpy' 2>/dev/null; then
    python3 - "$TMP/sync.st" "$SAMPLES" <<'PY' || fail "sync's checkpoint buffers"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
def get(name):
    a, b = h[name]["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4")
count = get("b1.num_batches_tracked")
assert h["b1.num_batches_tracked"]["shape"] == [], h["b1.num_batches_tracked"]
assert count[0] == int(sys.argv[2]) // 32, count
var = get("b1.running_var")
assert not np.all(var == 1.0) and np.all(var > 0), var
PY
fi

# A resume goes on from the statistics of the file: sync's run of 2 epochs, resumed from its own
# checkpoint after epoch 1, ends where it did in one piece.
if [ "$QUICK" != 1 ]; then
    "$BIN" "${COMMON[@]}" --mode sync --train-samples "$SAMPLES" --epochs 2 --checkpoint "$TMP/whole.st" \
        --checkpoint-every 1 --keep 1 >"$TMP/whole.out" 2>&1 || fail "sync 2 epochs exited $?: $(cat "$TMP/whole.out")"
    "$BIN" "${COMMON[@]}" --mode sync --train-samples "$SAMPLES" --epochs 2 --resume "$TMP/whole.st.1" \
        --checkpoint "$TMP/resumed.st" >"$TMP/resumed.out" 2>&1 || fail "sync resume exited $?: $(cat "$TMP/resumed.out")"
    [ "$(run_acc "$TMP/whole.out")" = "$(run_acc "$TMP/resumed.out")" ] ||
        fail "sync resumed ends at $(run_acc "$TMP/resumed.out"), in one piece $(run_acc "$TMP/whole.out")"
    cmp -s <(tail -c 4096 "$TMP/whole.st") <(tail -c 4096 "$TMP/resumed.st") ||
        fail "sync resumed: the file's last tensors differ from those of the run in one piece"

    # resnet20 learns on the CPU: 2 epochs of 2048 samples, far above chance (its default recipe
    # is for 15 epochs and more: a warm-up of one epoch, a cosine decay; here a constant rate).
    timeout -k 5 "$HANG_S" "$BIN" --data "$DATA" --seed 1 --no-progress --gpus cpu:2 --model resnet20 \
        --mode sync --train-samples 2048 --epochs 2 --batch 64 --lr 0.05 --warmup 0 \
        --schedule constant >"$TMP/r20.out" 2>&1 ||
        fail "resnet20 exited $?: $(cat "$TMP/r20.out")"
    acc=$(run_acc "$TMP/r20.out")
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.45) }' || fail "resnet20 did not learn: $(cat "$TMP/r20.out")"

    # Its recipe's defaults on CPU workers: the mode stays hogwild (allreduce is the GPUs'), the
    # batch 128 (256 is one GPU's).
    timeout -k 5 "$HANG_S" "$BIN" --data "$DATA" --seed 1 --no-progress --gpus cpu:1 --model resnet20 \
        --train-samples 256 --epochs 1 >"$TMP/r20d.out" 2>&1 || fail "resnet20 with its recipe exited $?: $(cat "$TMP/r20d.out")"
    grep -q "^note: resnet20's recipe: 1 epoch, batch 128," "$TMP/r20d.out" &&
        grep -q "^done: hogwild, 1 worker" "$TMP/r20d.out" ||
        fail "resnet20 on a CPU worker: not its recipe's hogwild at batch 128: $(cat "$TMP/r20d.out")"
fi

# On two GPUs (where this build and machine have them): allreduce evaluates on the replicas, each
# with replica 0's running statistics, so the run's accuracy is its checkpoint's (on one GPU the
# chunks differ in shape, so a near-tie may round the other way: within 5 of 10000 samples).
if "$BIN" --version | grep -qw cuda && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
    timeout -k 5 "$HANG_S" "$BIN" --data "$DATA" --seed 1 --no-progress --gpus 0,1 --model "$NET" --batch 32 \
        --mode allreduce --ema 0 --train-samples 2048 --epochs 1 --checkpoint "$TMP/ar.st" >"$TMP/ar.out" 2>&1 ||
        fail "allreduce on 2 GPUs exited $?: $(cat "$TMP/ar.out")"
    "$BIN" eval --checkpoint "$TMP/ar.st" --data "$DATA" --gpus 0 >"$TMP/eval.out" 2>&1 ||
        fail "eval of allreduce's checkpoint exited $?: $(cat "$TMP/eval.out")"
    a=$(run_acc "$TMP/ar.out") b=$(eval_acc "$TMP/eval.out")
    awk -v a="${a:-0}" -v b="${b:-1}" 'BEGIN { d = a - b; exit !(d <= 0.0005 && d >= -0.0005) }' ||
        fail "allreduce on 2 GPUs: the run's accuracy ${a:-none}, eval of its checkpoint ${b:-none}"
else
    echo "note: fewer than 2 GPUs: allreduce's evaluation on the replicas is not checked here"
fi
finish
