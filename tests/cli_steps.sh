#!/usr/bin/env bash
# cli_steps.sh - one step numbering everywhere: `step` is the run's optimizer updates (hogwild: one
# worker's batch; sync, ssp, allreduce, local: one clock), counted from the run's start and carried
# on by a resume. The terminal's lines, the log's eval, step and checkpoint records, --eval-every
# (multiples of N of that count) and the resume line all use it.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
# 2560 samples, 2 workers x batch 16: sync has 80 steps an epoch, hogwild 160
RUN=(--data "$DATA" --no-progress --train-samples 2560 --batch 16 --model mlp --eval-every 50)
evals() { grep '"type":"eval"' "$1" | grep -o '"step":[0-9]*' | cut -d: -f2 | tr '\n' ' '; }
lines() { grep '^epoch' "$1" | awk '{print $4}' | tr '\n' ' '; }

# sync: evaluations at exactly 50, 100, 150 and at the epoch ends (80, 160), on the terminal too
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode sync --epochs 2 --log "$TMP/s.jsonl" --log-steps \
    --checkpoint "$TMP/s.ck" --checkpoint-every 30s --keep 5
[ "$(evals "$TMP/s.jsonl")" = "50 80 100 150 160 " ] || fail "sync: eval steps $(evals "$TMP/s.jsonl")"
[ "$(lines "$TMP/out")" = "50 80 100 150 160 " ] || fail "sync: terminal steps $(lines "$TMP/out")"
# step records: the update each share went into, 1..160, with its clock in the epoch
python3 - "$TMP/s.jsonl" <<'PY' || fail "sync: step records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if r["type"] == "step"]
bad = [r for r in steps if r["step"] != (r["epoch"] - 1) * 80 + r["epoch_step"] + 1]
assert not bad, bad[:3]
assert sorted({r["step"] for r in steps}) == list(range(1, 161)), "steps not 1..160"
ck = [r["step"] for r in recs if r.get("event") == "checkpoint_written"]
assert ck == [30, 60, 90, 120, 150, 160], ck  # the epoch end is no step checkpoint
# each step record says when its worker took it: non-decreasing per worker, within the run
for w in (0, 1):
    t = [r["wall_s"] for r in sorted((r for r in steps if r["worker"] == w), key=lambda r: r["step"])]
    assert len(t) == 160 and t == sorted(t) and 0 <= t[0] and t[-1] <= recs[-1].get("wall_s", 1e9), t[:3]
PY
# tools/step_gaps.py reads them: 160 steps of worker 0 over 2 epochs, one epoch end between them,
# the evaluations at 50, 100 and 150 inside the epochs
python3 "${GT_SOURCE_DIR:-.}/tools/step_gaps.py" "$TMP/s.jsonl" >"$TMP/gaps" 2>&1 || fail "step_gaps.py: $(cat "$TMP/gaps")"
grep -q ': 160 steps, 2 epoch(s), median interval ' "$TMP/gaps" && grep -q '^| epoch end | 1 |' "$TMP/gaps" &&
    grep -q '^| evaluation | [1-9]' "$TMP/gaps" || fail "step_gaps.py: $(cat "$TMP/gaps")"

# a resume carries the numbering on, also on another worker count: the checkpoint at step 60
# (60 x 32 samples) goes on at step 61, 120 steps into epoch 1 at one worker x 16
expect_exit 0 -- "${RUN[@]}" --gpus cpu:1 --mode sync --epochs 2 --resume "$TMP/s.ck.4" \
    --checkpoint "$TMP/s2.ck" --log "$TMP/s2.jsonl" --log-steps
grep -q "^resuming $TMP/s.ck.4 at step 60 (120 steps into epoch 1; seed " "$TMP/out" ||
    fail "resume line: $(grep resuming "$TMP/out")"
grep -q '"start_step":60,"start_epoch_step":120,' "$TMP/s2.jsonl" || fail "config record's start: $(head -1 "$TMP/s2.jsonl")"
first=$(grep -m1 '"type":"step"' "$TMP/s2.jsonl")
echo "$first" | grep -q '"epoch":1,"step":61,"epoch_step":120,' || fail "resumed step record: $first"
# one worker has 160 steps an epoch: the rest of epoch 1 is steps 61..100, epoch 2 is 101..260
[ "$(evals "$TMP/s2.jsonl")" = "100 150 200 250 260 " ] || fail "resumed: eval steps $(evals "$TMP/s2.jsonl")"

# hogwild: a step is one worker's batch, and a step record names its own push's update; an
# evaluation is taken at the first push that reaches a multiple of 50 and shows the count when
# its copy was taken (another worker's push may be in it)
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --epochs 2 --log "$TMP/h.jsonl" --log-steps
python3 - "$TMP/h.jsonl" <<'PY' || fail "hogwild: steps $(evals "$TMP/h.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ev = [r["step"] for r in recs if r["type"] == "eval"]
want = [50, 100, 150, 160, 200, 250, 300, 320]
assert len(ev) == len(want) and all(w <= e <= w + 1 for e, w in zip(ev, want)), ev
assert ev[3] == 160 and ev[-1] == 320, ev
steps = [r for r in recs if r["type"] == "step"]
assert len(steps) == 320 and max(r["step"] for r in steps) == 320, len(steps)
assert sorted(r["epoch_step"] for r in steps if r["epoch"] == 1) == list(range(160)), "epoch_step"
# each step record names its own push: every update 1..320 once
assert sorted(r["step"] for r in steps) == list(range(1, 321)), "step records repeat a number"
PY

# local: the store moves at the averages (every --sync-every 4 steps): an evaluation falls at the
# first average at or past the multiple
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode local --sync-every 4 --epochs 2 --log "$TMP/l.jsonl"
[ "$(evals "$TMP/l.jsonl")" = "52 80 100 152 160 " ] || fail "local: eval steps $(evals "$TMP/l.jsonl")"

[ "$FAILS" -eq 0 ] || exit 1
echo "cli_steps: ok"
