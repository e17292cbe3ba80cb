#!/usr/bin/env bash
# cli_errors.sh - every bad flag, bad file and damaged input gets one line naming it and a nonzero
# exit, never a crash.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }

expect_error "--gpus" "0,,1" -- --gpus 0,,1
expect_error "--gpus" "GPU 0" -- --gpus 0,0
expect_error "--batch" "0" -- --batch 0
expect_error "--lr" "nan" -- --lr nan
# a float option names float's range, and a value that rounds out of range as a float
expect_error "--lr" "'1e308' is beyond a float's range" "> 0 and at most 3.402823e+38" -- --lr 1e308
expect_error "--lr" "'1e-50' is 0 as a float" "> 0" -- --lr 1e-50
expect_error "--momentum" "'0.99999999999' is 1 as a float" "0 <= x < 1" -- --momentum 0.99999999999
expect_error "--epochs" "12abc" -- --epochs 12abc
expect_error "--foo" -- --foo
expect_error "--stripes" "-1" -- --stripes -1
expect_error "--staleness" "-1" -- --staleness -1
expect_error "--staleness" "100 is out of range (0..63)" -- --mode ssp --staleness 100
expect_error "--sync-every" "0" -- --sync-every 0
expect_error "--mode" "bogus" -- --mode bogus
expect_error "--overlap" "sync" -- --overlap --mode sync
expect_error "--epochs" "twice" -- --epochs 1 --epochs 2
expect_error "--model" "conv:6:x" -- --data "$DATA" --model "conv:6:x relu fc:10"
expect_error "--model" "nosuchmodel" -- --data "$DATA" --model nosuchmodel
expect_error "$TMP/nowhere" -- --data "$TMP/nowhere"
expect_error "--train-samples" "70000" -- --data "$DATA" --train-samples 70000
expect_error "--gpus" "cpu:0" -- --gpus cpu:0

# damaged data: a truncated copy of the test labels
mkdir -p "$TMP/bad"
cp "$DATA"/*.gz "$TMP/bad/"
gzip -dc "$DATA/t10k-labels-idx1-ubyte.gz" | head -c 5000 | gzip >"$TMP/bad/t10k-labels-idx1-ubyte.gz"
expect_error "t10k-labels-idx1-ubyte" "truncated" -- --data "$TMP/bad" --gpus cpu:1 --epochs 1

# the log and checkpoint paths are checked before a long run
expect_error "--log" "$TMP/no/such/dir/log.jsonl" -- --data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 1 --log "$TMP/no/such/dir/log.jsonl"
touch "$TMP/file"
expect_error "--checkpoint" "$TMP/file/ck.safetensors" -- --data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 1 --checkpoint "$TMP/file/ck.safetensors"

# checkpoints that are not what they claim
echo "hello" >"$TMP/text.safetensors"
expect_error "$TMP/text.safetensors" -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/text.safetensors"
expect_error "$TMP/missing.safetensors" -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/missing.safetensors"
expect_error "--resume" "--init" -- --resume a --init b
expect_error "allreduce" -- --data "$DATA" --gpus cpu:2 --mode allreduce --train-samples 200 --epochs 1
expect_error "--on-nan skip" "allreduce" -- --mode allreduce --on-nan skip

# the devices open while the data loads, yet errors keep the order of one step after the other:
# the data's, the command line's, the checkpoint's, then the first device's in --gpus order
# (GPU 63 exists on no test machine; a CPU build refuses every GPU)
for i in 1 2 3; do
    expect_error "t10k-labels-idx1-ubyte" "truncated" -- --data "$TMP/bad" --gpus 63,62 --epochs 1
    expect_error "--model" "nosuchmodel" -- --data "$DATA" --gpus 63,62 --model nosuchmodel
    expect_error "$TMP/missing.safetensors" -- --data "$DATA" --gpus 63,62 --init "$TMP/missing.safetensors"
    expect_error "GPU 63" -- --data "$DATA" --gpus 63,62 --epochs 1
    grep -q "GPU 62" "$TMP/err" && fail "the second GPU's error came out: $(cat "$TMP/err")"
done

# out of memory: the message names the samples a pass and what was being allocated (an
# address-space limit stands in for a small machine; skipped where the binary cannot run under
# one, as with ASan). Evaluation passes as many samples as fit in a fixed budget, at least the
# training batch: here the batch.
if bash -c 'ulimit -v 1500000 && "$0" --version; exit $?' "$BIN" >/dev/null 2>&1; then
    (ulimit -v 1500000 && exec "$BIN" --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 200 \
        --no-progress --batch 256 --model "conv:512:3:1 relu conv:512:3:1 relu fc:10") >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
        grep -Eq "out of memory for the CPU buffers of 256 samples at a time: the (output of layer [0-9]+|input and the gradients) \([0-9]+ values a sample\)" "$TMP/err" ||
        fail "out of memory: exit $rc: $(cat "$TMP/err")"
fi

# command-line errors exit 2, also those found only once the data is loaded (--model); a file
# that cannot be read exits 1
expect_exit() {
    local want=$1
    shift
    "$BIN" "$@" >/dev/null 2>&1
    local rc=$?
    [ $rc -eq "$want" ] || fail "gputrain $* exited $rc, not $want"
}
expect_exit 2 --batch 0
expect_exit 2 --mode allreduce --gpus cpu:2
expect_exit 2 --data "$DATA" --gpus cpu:1 --model nosuchmodel
expect_exit 2 --data "$DATA" --gpus cpu:1 --model "conv:6:x relu fc:10"
expect_exit 2 --data "$DATA" --gpus cpu:1 --model "conv:6:5 fc:7"
expect_exit 1 --data "$TMP/nowhere"

# an option that the command does not read is refused, exit 2, naming the option and the command
expect_error "--log" "does not apply to eval" -- eval --checkpoint "$TMP/m.st" --log "$TMP/l.jsonl"
expect_error "--epochs" "does not apply to predict" -- predict --checkpoint "$TMP/m.st" --epochs 2 a.png
expect_error "--top" "does not apply to train" -- --top 2
expect_exit 2 eval --checkpoint "$TMP/m.st" --mode sync
expect_exit 2 predict --checkpoint "$TMP/m.st" --lr 0.1 a.png
# a fault injected into a worker the run does not have would never fire
expect_error "--inject-fault 1:3" "1 worker" -- --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 200 --inject-fault 1:3
expect_exit 2 --data "$DATA" --gpus cpu:2 --epochs 1 --train-samples 200 --inject-fault 5:3

finish
