#!/usr/bin/env bash
# cli_ema.sh - --ema end to end on the CPU: the run's log and done: line say the evaluations are of
# the moving average; its checkpoint holds ema.<tensor> beside the training parameters; a run
# resumed from it with --ema ends exactly where one run of both epochs ends (the average restored);
# eval and predict use the average and say so, --no-ema the training parameters; a checkpoint
# without an average evaluates as before.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --train-samples 1000 --batch 16 --no-progress --gpus cpu:1 --seed 7 --model lenet5)

# the final eval record's test loss and accuracy
last_eval() { grep '"type":"eval"' "$1" | tail -1 | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print(r["test_loss"], r["test_acc"], r["params"])'; }

expect_exit 0 -- "${RUN[@]}" --epochs 2 --ema 0.99 --checkpoint "$TMP/both" --log "$TMP/both.jsonl"
grep -q "^done: .*test acc [0-9.]* (ema 0.99)" "$TMP/out" || fail "done line: $(grep done: "$TMP/out")"
DONE_ACC=$(sed -n 's/^done: .*test acc \([0-9.]*\) (ema 0.99).*/\1/p' "$TMP/out")
grep '"type":"config"' "$TMP/both.jsonl" | grep -q '"ema":0.99[,}]' || fail "config record has no ema"
[ "$(grep '"type":"eval"' "$TMP/both.jsonl" | grep -c '"params":"ema"')" -eq 2 ] ||
    fail "eval records are not marked as the moving average's"
python3 - "$TMP/both" <<'PY' || fail "checkpoint: no ema tensors"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
params = [k for k in h if k != "__metadata__" and not k.startswith(("optim.", "ema."))]
ema = [k for k in h if k.startswith("ema.")]
assert ema and sorted("ema." + k for k in params if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))) == sorted(ema), ema
PY

# one epoch, then a resume with --ema: the same last evaluation as the run of both epochs
expect_exit 0 -- "${RUN[@]}" --epochs 1 --ema 0.99 --checkpoint "$TMP/one"
expect_exit 0 -- "${RUN[@]}" --epochs 2 --ema 0.99 --resume "$TMP/one" --checkpoint "$TMP/two" --log "$TMP/two.jsonl"
[ "$(last_eval "$TMP/two.jsonl")" = "$(last_eval "$TMP/both.jsonl")" ] ||
    fail "resumed --ema run: $(last_eval "$TMP/two.jsonl"), one run: $(last_eval "$TMP/both.jsonl")"
cmp -s "$TMP/two" "$TMP/both" || python3 - "$TMP/two" "$TMP/both" <<'PY' || fail "resumed checkpoint's tensors differ"
import json, struct, sys
def tensors(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a == b, [k for k in a if a[k] != b.get(k)]
PY

# eval and predict use the average and say so; --no-ema the training parameters
expect_exit 0 -- eval --checkpoint "$TMP/both" --data "$DATA" --gpus cpu:1
grep -q "(moving average of the parameters), epoch 2, .* acc $DONE_ACC " "$TMP/out" ||
    fail "eval of the average (done: test acc $DONE_ACC): $(cat "$TMP/out")"
expect_exit 0 -- eval --checkpoint "$TMP/both" --data "$DATA" --gpus cpu:1 --no-ema
grep -q "(training parameters, not its moving average), epoch 2" "$TMP/out" || fail "eval --no-ema: $(cat "$TMP/out")"
expect_exit 0 -- predict --checkpoint "$TMP/both" --data "$DATA" test:0-99
grep -q "^accuracy .* over the dataset samples (moving average of the parameters)$" "$TMP/out" ||
    fail "predict: $(tail -1 "$TMP/out")"

# a checkpoint without an average: as before
expect_exit 0 -- "${RUN[@]}" --epochs 1 --ema 0 --checkpoint "$TMP/plain"
expect_exit 0 -- eval --checkpoint "$TMP/plain" --data "$DATA" --gpus cpu:1
grep -q "moving average\|training parameters" "$TMP/out" && fail "eval of a plain checkpoint: $(cat "$TMP/out")"
finish
