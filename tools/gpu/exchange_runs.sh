#!/usr/bin/env bash
# exchange_runs.sh - what the gradient exchange does to whole runs on 2 GPUs: samples/s of
# lenet5 (batch 64) and cnn-wide (batch 128) in allreduce with the peer exchange and with NCCL
# (--exchange) and in sync, on GPU 0 and on GPUs 0,1, with the 2-GPU/1-GPU ratio; the time to
# 0.87 test accuracy of lenet5 allreduce (default recipe, 10 epochs) on 1 and 2 GPUs (wall clock
# of the first epoch-end evaluation that reaches it); then how a fault injected into worker 1 and
# a SIGINT end an allreduce run (exit status, seconds, the error line).
# samples/s: an epoch's samples over the median epoch after the first (lib.sh gt_median_sps).
# Usage: tools/exchange_runs.sh BIN DATA_DIR [EPOCHS] (default 3 epochs).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=exchange_runs
case "${1:-}" in
    --help) gt_usage "$0"; exit 0 ;;
    -*) usage_error "unknown option '$1'" ;;
esac
[ $# -ge 2 ] && [ $# -le 3 ] || usage_error "expected BIN DATA_DIR [EPOCHS]"
bin=$1 data=$2 epochs=${3:-3}
check_uint EPOCHS "$epochs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=0

# One run: model batch mode exchange gpus; prints a table row.
row() {
    local model=$1 batch=$2 mode=$3 x=$4 gpus=$5 log="$tmp/run.jsonl" sps ratio="" exchange=()
    rm -f "$log"
    [ "$x" = - ] || exchange=(--exchange "$x")
    if ! "$bin" --data "$data" --model "$model" --batch "$batch" --mode "$mode" "${exchange[@]}" \
        --gpus "$gpus" --epochs "$epochs" --no-progress --log "$log" >"$tmp/out" 2>&1; then
        echo "| $model | $batch | $mode | $x | $gpus | failed: $(tail -1 "$tmp/out") | | |"
        return
    fi
    sps=$(gt_median_sps "$log")
    if [ "$gpus" = 0 ]; then
        base=$sps
    else
        ratio=$(awk -v a="$sps" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')
    fi
    echo "| $model | $batch | $mode | $x | $gpus | $sps | $ratio |" \
        "$(grep -o 'test acc [0-9.]*' "$tmp/out" | tail -1) |"
}

echo "| model | batch | mode | exchange | gpus | samples/s | 2 GPUs / 1 | accuracy |"
echo "|---|---:|---|---|---|---:|---:|---|"
for x in p2p nccl; do
    row lenet5 64 allreduce $x 0
    row lenet5 64 allreduce $x 0,1
done
row lenet5 64 sync - 0
row lenet5 64 sync - 0,1
for x in p2p nccl; do
    row cnn-wide 128 allreduce $x 0
    row cnn-wide 128 allreduce $x 0,1
done

# Seconds since t0.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# Time to 0.87 test accuracy: gpus; prints a table row.
to_acc() {
    local log="$tmp/acc.jsonl" hit
    rm -f "$log"
    "$bin" --data "$data" --mode allreduce --gpus "$1" --no-progress --log "$log" >/dev/null 2>&1
    hit=$(grep '"type":"eval"' "$log" |
        sed 's/.*"epoch":\([0-9]*\).*"wall_s":\([0-9.]*\).*"test_acc":\([0-9.]*\).*/\1 \2 \3/' |
        awk '$3 >= 0.87 { printf "epoch %d, %.2f s (acc %.4f)", $1, $2, $3; exit }')
    echo "| lenet5 | 64 | allreduce | p2p | $1 | ${hit:-not reached in 10 epochs} |"
}

echo
echo "| model | batch | mode | exchange | gpus | first evaluation at test acc >= 0.87 |"
echo "|---|---:|---|---|---|---|"
to_acc 0
to_acc 0,1

echo
t0=$(date +%s.%N)
"$bin" --data "$data" --mode allreduce --gpus 0,1 --epochs 3 --no-progress --inject-fault 1:200 \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "inject-fault 1:200, allreduce p2p, GPUs 0,1: exit $rc after $(since "$t0") s:" \
    "$(tail -1 "$tmp/err")"
"$bin" --data "$data" --mode allreduce --gpus 0,1 --epochs 100 --no-progress >"$tmp/out" 2>&1 &
pid=$!
sleep 6
t0=$(date +%s.%N)
kill -INT "$pid"
wait "$pid"
rc=$?
echo "SIGINT 6 s into a 100-epoch allreduce p2p run, GPUs 0,1: exit $rc $(since "$t0") s after" \
    "the signal: $(tail -1 "$tmp/out")"
