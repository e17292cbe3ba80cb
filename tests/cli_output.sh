#!/usr/bin/env bash
# cli_output.sh - what a user sees and what the log holds: under a terminal (a pseudo-terminal from
# util-linux `script`) no evaluation line is printed onto the progress bar, the bar reaches 100%
# and the header names every device; with stdout and stderr in one file the bar's line is ended
# first; --quiet prints the done: line only; a run stopped before its first evaluation says "not
# evaluated"; a resumed run reports its own throughput and its log's wall_s counts on; the log
# opens with a config record holding every documented key and carries event records (checkpoint
# written, worker failed with its reason, signal). Exits 77 after the other checks when `script`
# is missing.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --gpus cpu:2)

# num FILE TYPE KEY [N]: KEY's number in the Nth record of TYPE (default: the last one).
num() {
    grep "\"type\":\"$2\"" "$1" | sed -n "${4:-\$}p" | grep -o "\"$3\":[-0-9.e+]*" | head -1 | cut -d: -f2
}
# ratio_below A B LIMIT: whether A / B < LIMIT.
ratio_below() { awk -v a="$1" -v b="$2" -v l="$3" 'BEGIN { exit !(b > 0 && a / b < l) }'; }
# glued FILE: lines printed onto the progress bar. The bar's drawings that were cleared
# (\r[...] ... \r ESC[K) and lines of nothing but drawings (the bar's own, ended) are removed;
# what still holds a drawing, or an evaluation's text not at column 0, is glued.
BAR=$'\r''\[[#.]+\] +[0-9.]+%  epoch [0-9]+/[0-9]+ +[0-9]+ samples/s(  loss [0-9.]+)?(  [0-9]+ s left)?('$'\x1b''\[K)?'
glued() {
    sed -E "s|($BAR)+\r\x1b\[K||g; s|\r$||" "$1" | grep -avE "^($BAR)+\$" |
        grep -aE '\[[#.]+\] +[0-9.]+%|train loss' | grep -av '^epoch '
}

# ---- the terminal -------------------------------------------------------------------------------
# 20000 / 48 leaves a partial batch that hogwild does not train: the bar counts the samples an
# epoch trains. A small --eval-every prints lines while the bar is up. Sanitizer builds (GT_QUICK=1)
# run it three times at 10-50x the time: a quarter of the samples there (4820 / 48 leaves one too)
# and four evaluations instead of nine, each of 10,000 test images.
TERM_RUN=("${RUN[@]}" --epochs 1 --train-samples 20000 --batch 48 --eval-every 25)
if [ "${GT_QUICK:-0}" = 1 ]; then
    TERM_RUN=("${RUN[@]}" --epochs 1 --train-samples 4820 --batch 48 --eval-every 16)
fi
if command -v script >/dev/null 2>&1; then
    cmd="$BIN ${TERM_RUN[*]}"
    timeout -k 5 $HANG_S script -qfec "$cmd" /dev/null >"$TMP/tty" 2>&1 </dev/null ||
        fail "under a terminal: exit $?: $(tail -c 300 "$TMP/tty")"
    [ -z "$(glued "$TMP/tty")" ] || fail "evaluation lines glued to the bar: $(glued "$TMP/tty" | head -2)"
    grep -aq $'\r\x1b\\[K' "$TMP/tty" || fail "the bar was never cleared for a line (too fast to test?)"
    [ "$(grep -ac '^epoch ' "$TMP/tty")" -ge 3 ] || fail "too few evaluation lines: $(cat -v "$TMP/tty" | head -5)"
    grep -aq '100.0%' "$TMP/tty" || fail "the bar stops short of 100%: $(tr '\r' '\n' <"$TMP/tty" | grep -a '%' | tail -1)"
    grep -aq '(cpu:0, cpu:1)' "$TMP/tty" || fail "the header does not name both devices: $(head -1 "$TMP/tty")"
    # --quiet under a terminal: the done: line alone, no bar
    timeout -k 5 $HANG_S script -qfec "$cmd --quiet" /dev/null >"$TMP/ttyq" 2>&1 </dev/null
    tr -d '\r' <"$TMP/ttyq" >"$TMP/ttyq.txt"
    [ "$(wc -l <"$TMP/ttyq.txt")" -eq 1 ] && grep -q '^done: .*test acc 0\.[0-9]* (ema 0\.999)$' "$TMP/ttyq.txt" ||
        fail "--quiet under a terminal: $(cat -v "$TMP/ttyq")"
    HAVE_SCRIPT=1
else
    HAVE_SCRIPT=0
fi

# --progress with stdout and stderr in one file: the bar's line is ended before each line
timeout -k 5 $HANG_S "$BIN" "${TERM_RUN[@]}" --progress >"$TMP/both" 2>&1 </dev/null || fail "--progress 2>&1: exit $?"
[ -z "$(glued "$TMP/both")" ] || fail "--progress 2>&1: lines glued to the bar: $(glued "$TMP/both" | head -2)"

# --quiet: exactly the final line on stdout, nothing on stderr
expect_exit 0 -- "${RUN[@]}" --epochs 1 --train-samples 2000 --quiet
[ "$(wc -l <"$TMP/out")" -eq 1 ] && grep -q '^done: hogwild, 2 workers, .* samples/s, test acc 0\.[0-9]* (ema 0\.999)$' "$TMP/out" ||
    fail "--quiet stdout: $(cat "$TMP/out")"
[ -s "$TMP/err" ] && fail "--quiet stderr: $(cat "$TMP/err")"
grep -q -- '--quiet *print only the final result line' <("$BIN" --help) || fail "--help does not say what --quiet prints"

# start-up (launch to training) beside the training time: in the done: line and the summary, more
# than nothing and less than the whole process took
t0=$(date +%s.%N)
expect_exit 0 -- "${RUN[@]}" --epochs 1 --train-samples 2000 --quiet --log "$TMP/su.jsonl"
t1=$(date +%s.%N)
su=$(num "$TMP/su.jsonl" summary startup_s)
su_line=$(sed -nE 's/^done: .* samples in [0-9.]+ s \(startup ([0-9]+\.[0-9]{2}) s: data [0-9.]+ s beside devices [0-9.]+ s\): .*/\1/p' "$TMP/out")
[ -n "$su_line" ] && awk -v a="$su" -v b="$su_line" 'BEGIN { d = a - b; exit !(d < 0.006 && d > -0.006) }' ||
    fail "done: line start-up '$su_line' against the summary's startup_s '$su': $(cat "$TMP/out")"
ratio_below 0 "$su" 1 && awk -v s="$su" -v a="$t0" -v b="$t1" 'BEGIN { exit !(s < b - a) }' ||
    fail "startup_s $su: not within the process's $t0 .. $t1"
# its parts ran side by side, each within the whole
for k in startup_data_s startup_devices_s startup_run_s; do
    v=$(num "$TMP/su.jsonl" summary $k)
    awk -v v="$v" -v s="$su" 'BEGIN { exit !(v != "" && v >= 0 && v <= s) }' || fail "$k '$v' not within startup_s $su"
done
# the CPU times no convolution algorithm and reads no cache of them (--conv-cache is the GPUs')
for k in conv_searches conv_from_file; do
    [ "$(num "$TMP/su.jsonl" summary $k)" = 0 ] || fail "$k on the CPU: $(num "$TMP/su.jsonl" summary $k)"
done

# ---- resume: this run's own throughput, wall_s counting on --------------------------------------
# Three epochs, then the fourth resumed: its throughput is its own samples over its own time
# (every sample since epoch 0 would make it about 4x), in the summary, the done: line and epoch 4's
# line alike. Each is checked against the run's own record, not against another run's throughput,
# which whatever else the machine runs meanwhile changes.
R=("${RUN[@]}" --train-samples 4096 --no-progress --checkpoint "$TMP/rs.st" --log "$TMP/rs.jsonl")
expect_exit 0 -- "${R[@]}" --epochs 3
wall1=$(num "$TMP/rs.jsonl" eval wall_s)
expect_exit 0 -- "${R[@]}" --epochs 4 --resume "$TMP/rs.st"
cp "$TMP/out" "$TMP/rs.out"
sps2=$(num "$TMP/rs.jsonl" summary samples_per_s)
own=$(awk -v n="$(num "$TMP/rs.jsonl" summary run_samples)" -v t="$(num "$TMP/rs.jsonl" summary run_wall_s)" \
    'BEGIN { if (t > 0) print n / t }')
line_own=$(awk -v n="$(num "$TMP/rs.jsonl" eval samples 4)" -v n0="$(num "$TMP/rs.jsonl" config start_samples 2)" \
    -v t="$(num "$TMP/rs.jsonl" eval wall_s 4)" -v t0="$(num "$TMP/rs.jsonl" config start_wall_s 2)" \
    'BEGIN { if (t > t0) print (n - n0) / (t - t0) }')
line_sps=$(grep '^epoch *4 ' "$TMP/rs.out" | sed -E 's/.* ([0-9]+) samples\/s .*/\1/')
done_sps=$(grep '^done:' "$TMP/rs.out" | sed -E 's/.* ([0-9]+) samples\/s.*/\1/')
# near A B: A is B within 1% (the log's and the lines' rounding)
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && b > 0 && d < 0.01 * b + 1 && -d < 0.01 * b + 1) }'; }
near "$sps2" "$own" && near "$done_sps" "$own" ||
    fail "resumed throughput: summary $sps2, done: line $done_sps samples/s, not this run's $own: $(cat "$TMP/rs.out")"
near "$line_sps" "$line_own" ||
    fail "resumed epoch 4: $line_sps samples/s, not its samples and time since the resume's $line_own: $(cat "$TMP/rs.out")"
grep -q '^done: hogwild, 2 workers, 4096 samples (16384 since epoch 0)' "$TMP/rs.out" ||
    fail "resumed done: line: $(grep '^done:' "$TMP/rs.out")"
wall2=$(num "$TMP/rs.jsonl" eval wall_s 4)
ratio_below "$wall1" "$wall2" 1 || fail "wall_s restarts on resume: epoch 3 at $wall1 s, epoch 4 at $wall2 s"
start=$(num "$TMP/rs.jsonl" config start_wall_s 2)
ratio_below 0 "$start" 1 && ratio_below "$start" "$wall2" 1 ||
    fail "resumed config record: start_wall_s $start (epoch 3 at $wall1 s, epoch 4 at $wall2 s)"
[ "$(num "$TMP/rs.jsonl" summary run_samples)" = 4096 ] && [ "$(num "$TMP/rs.jsonl" summary samples)" = 16384 ] ||
    fail "resumed summary: $(grep summary "$TMP/rs.jsonl" | tail -1)"
# a finished run, --quiet: says so, exit 0
expect_exit 0 -- "${R[@]}" --epochs 4 --resume "$TMP/rs.st" --quiet
grep -q '^nothing to train: ' "$TMP/out" && [ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "finished run, --quiet: $(cat "$TMP/out")"

# ---- the log's records ---------------------------------------------------------------------------
CONFIG_KEYS="version cuda nccl mpi revision argv host started mode workers hosts devices evaluator model model_spec parameters input
nclasses data data_fingerprint train_samples test_samples val_samples batch epochs seed eval_every val_split patience save_best optimizer lr momentum
nesterov weight_decay beta1 beta2 eps schedule warmup step_epochs gamma stripes staleness sync_every
balance overlap tf32 deterministic on_nan checkpoint checkpoint_every checkpoint_unit keep resume init
allow_nonfinite log_steps inject_fault stall_timeout host_timeout start_epoch start_step
start_epoch_step start_samples start_wall_s"
SUMMARY_KEYS="mode workers hosts model batch optimizer lr momentum weight_decay schedule warmup seed
epochs stripes samples wall_s run_samples run_wall_s samples_per_s stale_max stale_mean stale_p99 stale_p99_capped
lock_wait_share barrier_wait_share clock_spread_max skipped_nonfinite test_acc interrupted data
version startup_s startup_data_s startup_devices_s startup_run_s conv_searches conv_from_file"
head -1 "$TMP/rs.jsonl" | grep -q '^{"type":"config",' || fail "the log does not open with a config record"
for k in $CONFIG_KEYS; do
    head -1 "$TMP/rs.jsonl" | grep -q "\"$k\":" || fail "config record lacks \"$k\""
done
head -1 "$TMP/rs.jsonl" | grep -o '"argv":"[^"]*"' | grep -qF -- "--log $TMP/rs.jsonl" ||
    fail "the config record's argv is not the command line: $(head -1 "$TMP/rs.jsonl" | grep -o '"argv":"[^"]*"')"
head -1 "$TMP/rs.jsonl" | grep -qE '"started":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z"' ||
    fail "the config record has no UTC start time"
head -1 "$TMP/rs.jsonl" | grep -q "\"devices\":\[\"cpu:0\",\"cpu:1\"\].*\"data\":\"$DATA\"" ||
    fail "config record: $(head -1 "$TMP/rs.jsonl")"
for k in $SUMMARY_KEYS; do
    grep '"type":"summary"' "$TMP/rs.jsonl" | tail -1 | grep -q "\"$k\":" || fail "summary record lacks \"$k\""
done
# hogwild's worker records split the step into the store's pull, the device, the store's push and
# waits, and tools/step_phases.py tabulates them (cli_phases.sh checks every mode's)
for k in pull_us device_us push_us wait_us phases_share; do
    [ "$(grep -c "\"type\":\"worker\",.*\"$k\":[0-9]" "$TMP/rs.jsonl")" = "$(grep -c '"type":"worker"' "$TMP/rs.jsonl")" ] ||
        fail "hogwild's worker records lack \"$k\": $(grep '"type":"worker"' "$TMP/rs.jsonl")"
done
python3 "${GT_SOURCE_DIR:-.}/tools/step_phases.py" "$TMP/rs.jsonl" >"$TMP/phases" 2>&1 || fail "step_phases.py: $(cat "$TMP/phases")"
grep -qE '^\| rs\.jsonl \| lenet5 \| hogwild \| 2 \| 64 \| store \| [0-9,]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|' "$TMP/phases" ||
    fail "step_phases.py's row: $(cat "$TMP/phases")"
grep -q "^{\"type\":\"event\",\"event\":\"checkpoint_written\",\"wall_s\":[0-9.]*,\"samples\":16384,\"path\":\"$TMP/rs.st\",\"epoch\":4,\"step\":256,\"epoch_step\":0}$" "$TMP/rs.jsonl" ||
    fail "no checkpoint_written event for epoch 4: $(grep event "$TMP/rs.jsonl")"

# checkpoint_written carries the saved state's time: the epoch end's, as its eval record says
ck_wall=$(grep '"event":"checkpoint_written"' "$TMP/rs.jsonl" | tail -1 | grep -o '"wall_s":[0-9.]*' | cut -d: -f2)
[ -n "$ck_wall" ] && [ "$ck_wall" = "$(num "$TMP/rs.jsonl" eval wall_s 4)" ] ||
    fail "checkpoint_written wall_s $ck_wall, not the saved state's $(num "$TMP/rs.jsonl" eval wall_s 4)"

# a non-finite number is written as null (the log stays JSON), the train loss as it was
expect_exit 0 -- --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 500 --lr 1e6 --on-nan skip --log-steps \
    --no-progress --log "$TMP/nan.jsonl"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$TMP/nan.jsonl" 2>"$TMP/nan.err" ||
    fail "a NaN makes the log invalid JSON: $(grep -iE ':-?(nan|inf)' "$TMP/nan.jsonl" | head -2)"
grep -q '^epoch .*train loss -*nan' "$TMP/out" && ! grep -q '"type":"eval",.*"train_loss":null' "$TMP/nan.jsonl" &&
    fail "NaN train loss logged as: $(grep '"type":"eval"' "$TMP/nan.jsonl")"

# a FIFO with no reader as --log: refused at once with one line, never a hang
mkfifo "$TMP/log.fifo"
EXPECT_TIMEOUT=30 expect_error "$TMP/log.fifo" "no reader" -- "${RUN[@]}" --epochs 1 --train-samples 500 \
    --no-progress --log "$TMP/log.fifo"
# with a reader it is written as a file is
cat "$TMP/log.fifo" >"$TMP/fifo.copy" &
expect_exit 0 -- "${RUN[@]}" --epochs 1 --train-samples 500 --no-progress --log "$TMP/log.fifo"
wait
grep -q '"type":"summary"' "$TMP/fifo.copy" || fail "the log through a FIFO: $(head -c 200 "$TMP/fifo.copy")"

# a worker that fails: its event and its worker record give the reason
expect_exit 0 -- "${RUN[@]}" --epochs 1 --train-samples 2000 --no-progress --inject-fault 1:3 --log "$TMP/f.jsonl"
grep -q '"event":"worker_failed",.*"worker":1,"device":"cpu:1","reason":"injected fault at step 3"' "$TMP/f.jsonl" ||
    fail "no worker_failed event with its reason: $(grep -v eval "$TMP/f.jsonl")"
grep -q '"type":"worker","worker":1,.*"failed":1,.*"reason":"injected fault at step 3"' "$TMP/f.jsonl" ||
    fail "failed worker's record lacks the reason: $(grep '"type":"worker"' "$TMP/f.jsonl")"

# a run that fails: its error as a run_failed event before the summary
expect_exit 1 -- --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 2000 --no-progress --inject-fault 0:3 --log "$TMP/ff.jsonl"
grep -A1 '"event":"run_failed",.*"message":"every worker failed: worker 0 (cpu:0): injected fault at step 3' "$TMP/ff.jsonl" |
    grep -q '"type":"summary"' || fail "no run_failed event before the summary: $(grep -v eval "$TMP/ff.jsonl")"

# SIGINT before the first evaluation: a signal event, "not evaluated", test_acc null
"$BIN" "${RUN[@]}" --epochs 2 --no-progress --log "$TMP/s.jsonl" >"$TMP/s.out" 2>"$TMP/s.err" </dev/null &
pid=$!
wait_for $HANG_S logged "$TMP/s.jsonl" config
sleep 0.3
kill -INT $pid
wait $pid
rc=$?
if grep -q '"type":"eval"' "$TMP/s.jsonl"; then
    echo "note: the run evaluated before SIGINT came; 'not evaluated' not checked"
else
    grep -q '^done: .*, not evaluated; interrupted by signal 2$' "$TMP/s.out" || fail "interrupted before evaluating: $(cat "$TMP/s.out")"
    grep -q '"test_acc":null' "$TMP/s.jsonl" || fail "summary test_acc: $(grep summary "$TMP/s.jsonl")"
fi
grep -q 'test acc 0\.0000' "$TMP/s.out" && fail "interrupted run reports test acc 0.0000"
[ $rc -eq 130 ] || fail "SIGINT: exit $rc"
grep -q '"event":"signal",.*"signal":2,"name":"SIGINT"' "$TMP/s.jsonl" || fail "no signal event: $(grep -v eval "$TMP/s.jsonl")"

if [ "$HAVE_SCRIPT" = 0 ] && [ $FAILS -eq 0 ]; then
    echo "skipped: the terminal checks need script (util-linux); the others passed"
    exit 77
fi
finish
