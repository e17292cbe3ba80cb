#!/usr/bin/env bash
# cli_resume.sh - what --resume keeps and refuses, and command-line errors found late: a resume
# keeps the checkpoint's seed, optimizer and data (another is refused, exit 2, naming the flag),
# takes the run's own options again (--lr, --schedule, --epochs, ...) unless given again and then
# ends as the run did, notes another --lr, and saves to the file it resumed unless --checkpoint
# says otherwise; a finished run says there is nothing to train and exits 0; local mode warns that
# its resume is approximate; a mid-epoch checkpoint goes on at its sample of the epoch's order in
# another layout (every sample once, also after a SIGINT) or is refused where the layout's step
# cannot start there; hogwild's static slices resume only in their layout, with a warning; a step
# at an epoch's end goes on with the next epoch; allreduce on CPU workers and hex or non-finite
# numbers in flags and specs are command-line errors (exit 2).
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --train-samples 200 --no-progress)
ONE=(--gpus cpu:1)

expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 1 --seed 7 --checkpoint "$TMP/ck"
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --seed 1 --resume "$TMP/ck"
grep -q -- "--seed 1: .* was trained with --seed 7" "$TMP/err" || fail "other seed: $(cat "$TMP/err")"
# what a resume must keep is a command-line error (exit 2) naming the flag and both values
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --optimizer adam --resume "$TMP/ck"
grep -q -- "^gputrain: --optimizer adam: .* was trained with --optimizer sgd" "$TMP/err" || fail "other optimizer: $(cat "$TMP/err")"
expect_exit 2 -- --data "$DATA" --train-samples 300 --no-progress "${ONE[@]}" --epochs 2 --resume "$TMP/ck"
grep -q -- "^gputrain: --train-samples: .* was trained on 200 training samples, this run has 300" "$TMP/err" ||
    fail "other --train-samples: $(cat "$TMP/err")"
# what it may change is used, and a note says so
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --lr 0.02 --checkpoint "$TMP/ck.lr" --resume "$TMP/ck"
grep -q "^note: --resume: --lr 0.02 from here on (.* ran with --lr 0.05)$" "$TMP/out" || fail "other --lr: $(cat "$TMP/out")"
# a resume takes the run's own options again unless given again: a run at --lr 0.01 with a cosine
# over 3 epochs, resumed from its first epoch's checkpoint without them, ends as the run did
own=(--epochs 3 --lr 0.01 --schedule cosine --momentum 0.5)
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" "${own[@]}" --checkpoint-every 1 --keep 2 --checkpoint "$TMP/own"
last_eval() { sed -n 's/^epoch *3 .*\(test loss [0-9.]* acc [0-9.]*\).*/\1/p' "$1"; }
want=$(last_eval "$TMP/out")
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --resume "$TMP/own.2" --checkpoint "$TMP/own.r"
grep -q "^note: --resume: the run's own --epochs=3 --lr=0.01 --schedule=cosine --momentum=0.5 again" "$TMP/out" ||
    fail "resume did not say what it took again: $(cat "$TMP/out")"
got=$(last_eval "$TMP/out")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "resumed without its options: '$got', the run: '$want'"
# and one given again is the command line's (a note says so), the others still the run's
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --lr 0.02 --resume "$TMP/own.2" --checkpoint "$TMP/own.r2"
grep -q "^note: --resume: the run's own --epochs=3 --schedule=cosine --momentum=0.5 again" "$TMP/out" &&
    grep -q "^note: --resume: --lr 0.02 from here on (.* ran with --lr 0.01)$" "$TMP/out" ||
    fail "resume with --lr given again: $(cat "$TMP/out")"
# a run's --model @FILE resumes as the checkpoint's spec: the file may be gone since
printf 'conv:4:3 relu fc:10\n' >"$TMP/net.spec"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --model "@$TMP/net.spec" --epochs 1 --checkpoint "$TMP/spec"
rm "$TMP/net.spec"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --resume "$TMP/spec"
grep -q "^note: --resume: the run's own --model=init:torch conv:4:3:0 relu fc:10 again" "$TMP/out" ||
    fail "resume of a spec file's model: $(cat "$TMP/out" "$TMP/err")"
# without --checkpoint a resumed run saves to the file it resumed, and says so
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --resume "$TMP/ck"
grep -q "seed 7" "$TMP/out" || fail "resume does not say it keeps seed 7: $(cat "$TMP/out")"
grep -q "^resuming $TMP/ck at step [0-9]* (the start of epoch 2; seed 7); saving to $TMP/ck$" "$TMP/out" || fail "resume: $(cat "$TMP/out")"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 2 --seed 7 --resume "$TMP/ck"

# a finished run: nothing trained, exit 0
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --epochs 1 --resume "$TMP/ck"
grep -q "nothing to train: the checkpoint $TMP/ck is at epoch 2 of 1" "$TMP/out" ||
    fail "finished run (or the resume before it saved nothing): $(cat "$TMP/out")"
grep -q "^done:" "$TMP/out" && fail "finished run trained: $(cat "$TMP/out")"

# local mode's resume is approximate, and says so
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode local --epochs 1 --checkpoint "$TMP/local"
expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode local --epochs 2 --resume "$TMP/local"
grep -q "warning: --mode local resumes approximately" "$TMP/err" || fail "local resume: no warning"

# a checkpoint taken mid-epoch (step 10 of 12 at --batch 16: sample 160 of the epoch's order) goes
# on at that sample in another layout whose step divides it, and is refused in one whose does not
MID=(--batch 16 --epochs 1 --checkpoint-every 10s --keep 1)
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" "${MID[@]}" --checkpoint "$TMP/mid"
cp "$TMP/mid.1" "$TMP/mid.keep"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 32 --epochs 1 --resume "$TMP/mid.1" --checkpoint "$TMP/mid.b32"
grep -q "^note: --resume: epoch 1 goes on at sample 160 of its order, step 5 of this run's 1 workers x batch 32$" "$TMP/out" ||
    fail "resume at another --batch: $(cat "$TMP/out" "$TMP/err")"
expect_exit 2 -- "${RUN[@]}" "${ONE[@]}" --batch 48 --epochs 1 --resume "$TMP/mid.keep" --checkpoint "$TMP/mid.b48"
grep -q "^gputrain: --resume: .* stopped at sample 160 of epoch 1's order; this run's steps (1 workers x --batch 48) cannot start there" "$TMP/err" ||
    fail "resume at a --batch whose step does not divide the position: $(cat "$TMP/err")"
[ -e "$TMP/mid.b48" ] && fail "a refused resume wrote a checkpoint"
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 1 --resume "$TMP/mid.keep" --checkpoint "$TMP/mid.same"
grep -q "restarts\|^note: --resume: epoch" "$TMP/out" "$TMP/err" && fail "resume in the same layout: $(cat "$TMP/out" "$TMP/err")"

# hogwild --balance static: each worker on a slice of its own, so a mid-epoch checkpoint goes on
# only in its layout, with a warning that it is not exact
ST=(--train-samples 400 --balance static --batch 16 --epochs 1)
# A step checkpoint records the slowest slice's step, which on a loaded machine may still be 0 (an
# epoch's start, which resumes exactly) or its last: the test takes a kept one from inside.
expect_exit 0 -- --data "$DATA" --no-progress "${ST[@]}" --gpus cpu:4 --checkpoint-every 1s --keep 12 --checkpoint "$TMP/st"
mid=$(python3 - "$TMP/st" <<'PY'
import json, struct, sys
for k in range(1, 13):
    try:
        raw = open(f"{sys.argv[1]}.{k}", "rb").read()
    except OSError:
        continue
    meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
    if meta["epoch"] == "0" and 0 < int(meta["step"]) < 400 // 4 // 16:  # a slice has 6 steps
        print(f"{sys.argv[1]}.{k}")
        break
PY
)
[ -n "$mid" ] || fail "static slices: no kept checkpoint inside the epoch"
expect_exit 0 -- --data "$DATA" --no-progress "${ST[@]}" --gpus cpu:4 --resume "$mid" --checkpoint "$TMP/st.same"
grep -q "^gputrain: warning: --resume: .* stopped inside epoch 1 with each worker (or host) on a part of its own" "$TMP/err" ||
    fail "static slices resumed: no warning: $(cat "$TMP/err")"
expect_exit 2 -- --data "$DATA" --no-progress "${ST[@]}" --gpus cpu:2 --resume "$mid" --checkpoint "$TMP/st.two"
grep -q "whose samples done are not the start of the epoch's order" "$TMP/err" || fail "static slices, 4 -> 2 workers: $(cat "$TMP/err")"

# every sample of an interrupted and resumed epoch is trained exactly once, the worker count changed
# in between: sync's step records (epoch_step: the clock, worker) name the samples (clock x W + worker) x batch
union_once() { # LOG1 STOP W1 LOG2 W2 BATCH [EPOCH]: run 1's records before clock STOP, then run 2's
    python3 - "$@" <<'PY'
import json, sys
l1, stop, w1, l2, w2, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
epoch = int(sys.argv[7]) if len(sys.argv) > 7 else 1
def pos(path, w, keep):
    out = []
    for line in open(path):
        r = json.loads(line)
        if r["type"] == "step" and r["epoch"] == epoch and keep(r["epoch_step"]):
            s = r["epoch_step"]
            out += range((s * w + r["worker"]) * b, (s * w + r["worker"] + 1) * b)
    return out
done = pos(l1, w1, lambda s: s < stop) + pos(l2, w2, lambda s: True)
if len(done) != len(set(done)) or sorted(done) != list(range(len(done))) or len(done) < 150:
    sys.exit("trained %d samples, %d distinct, of %s" % (len(done), len(set(done)), sorted(done)[:8]))
PY
}
for mode in sync ssp; do
    expect_exit 0 -- "${RUN[@]}" --gpus cpu:2 --mode $mode --batch 16 --epochs 1 --checkpoint-every 4s --keep 2 \
        --checkpoint "$TMP/u$mode" --log-steps --log "$TMP/u1$mode.jsonl"
    expect_exit 0 -- "${RUN[@]}" --gpus cpu:4 --mode $mode --batch 16 --epochs 1 --resume "$TMP/u$mode.1" \
        --checkpoint "$TMP/u2$mode" --log-steps --log "$TMP/u2$mode.jsonl"
    grep -q "^resuming .* at step 4 (2 steps into epoch 1; " "$TMP/out" || fail "$mode: resumed at: $(grep resuming "$TMP/out")"
    grep -q "^note: --resume: 4 workers from here on (.* ran with 2 workers)$" "$TMP/out" || fail "$mode: no note of the worker count: $(cat "$TMP/out")"
    union_once "$TMP/u1$mode.jsonl" 4 2 "$TMP/u2$mode.jsonl" 4 16 || fail "$mode: 2 workers, then 4: not each sample once"
    # the same across a SIGINT, resumed on one worker
    rm -f "$TMP/s$mode"*
    "$BIN" --data "$DATA" --no-progress --train-samples 2000 --gpus cpu:2 --mode $mode --batch 16 --epochs 1000 \
        --checkpoint "$TMP/s$mode" --log-steps --log "$TMP/s1$mode.jsonl" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do grep -q '"type":"eval"' "$TMP/s1$mode.jsonl" 2>/dev/null && break; sleep 0.1; done
    sleep 0.2
    kill -INT $pid
    wait $pid
    ck=$(grep '"event":"checkpoint_written"' "$TMP/s1$mode.jsonl" | tail -1)
    e=$(echo "$ck" | grep -o '"epoch":[0-9]*' | cut -d: -f2) s=$(echo "$ck" | grep -o '"epoch_step":[0-9]*' | cut -d: -f2)
    [ -n "$e" ] && [ -n "$s" ] || { fail "$mode: no checkpoint after SIGINT: $ck"; continue; }
    expect_exit 0 -- --data "$DATA" --no-progress --train-samples 2000 --gpus cpu:1 --mode $mode --batch 16 --epochs $((e + 1)) \
        --resume "$TMP/s$mode" --log-steps --log "$TMP/s2$mode.jsonl"
    union_once "$TMP/s1$mode.jsonl" "$s" 2 "$TMP/s2$mode.jsonl" 1 16 $((e + 1)) ||
        fail "$mode: SIGINT at epoch $e step $s, resumed on 1 worker: not each sample once"
done

# a step checkpoint at an epoch's last step (12 of 12) resumes at the next epoch's start, with no
# warning, and ends where the uninterrupted run ended
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 2 --checkpoint-every 12s --keep 2 --checkpoint "$TMP/end"
whole=$(grep '^epoch   2 ' "$TMP/out" | sed 's/ *[0-9]* samples\/s.*//')
expect_exit 0 -- "${RUN[@]}" "${ONE[@]}" --batch 16 --epochs 2 --resume "$TMP/end.2"
grep -q "resuming $TMP/end.2 at step 12 (the start of epoch 2; " "$TMP/out" || fail "end of epoch: the checkpoint at step 12 does not go on at the next epoch: $(cat "$TMP/out")"
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
