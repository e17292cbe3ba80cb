#!/usr/bin/env bash
# onegpu_check.sh - one GPU: build with CUDA, run the parity test and compute-sanitizer on it, then
# time the layer path (TF32 off and on) on cnn-wide
# allreduce batch 128, lenet5 (fused kernels) at batch 64 and 256, a 10-epoch lenet5 run from launch
# to exit (split into start-up, training and the rest as its log gives them), and PyTorch's
# whole-step CUDA graph beside them where tools/torch_lenet.py is present.
# Prints a table last; every figure comes from this run on this card.
#
# Usage: tools/onegpu_check.sh --data DIR [--gpu 0] [--epochs 3] [--skip-sanitizer] [--skip-timing]
#                              [--skip-parity] [--wall-runs 1]
#                              [--baseline BIN]   (BIN: an older gputrain, timed on the same rows)
# (the sanitizer pass takes minutes: split it from the timings where a call has a time limit)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=onegpu_check
data="" gpu=0 epochs=3 sanitize=1 timing=1 base= parity_run=1 wall_runs=1
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --data) data=$2; shift 2 ;;
        --gpu) gpu=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --skip-sanitizer) sanitize=0; shift ;;
        --skip-timing) timing=0; shift ;;
        --skip-parity) parity_run=0; shift ;;
        --wall-runs) need_value "$1" $#; check_uint "$1" "$2"; wall_runs=$2; shift 2 ;;
        --baseline) base=$2; shift 2 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ -n "$data" ] || { echo "onegpu_check: --data DIR is required" >&2; exit 2; }
build="$root/build-cuda"
bin="$build/gputrain"
work=$(mktemp -d)
table="$work/table.txt"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu" | head -1)
commit=${GT_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}

echo "== build ($commit)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGT_CUDA=ON -DGT_MPI=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

parity="not run"
if [ "$parity_run" = 1 ]; then
    echo "== test_cuda_parity"
    (cd "$build" && GT_SOURCE_DIR="$root" CUDA_VISIBLE_DEVICES=$gpu ./test_cuda_parity \
        >"$work/parity.log" 2>&1) && parity=passed || parity="FAILED (exit $?)"
    tail -n 20 "$work/parity.log"
    echo "test_cuda_parity: $parity"
fi
if [ "$sanitize" = 1 ]; then
    echo "== compute-sanitizer memcheck on test_cuda_parity"
    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    (cd "$build" && GT_SOURCE_DIR="$root" CUDA_VISIBLE_DEVICES=$gpu timeout 420 \
        "$san" --tool memcheck --leak-check full ./test_cuda_parity >"$work/memcheck.log" 2>&1) ||
        echo "memcheck: exit $? (124: timed out)"
    grep -E 'ERROR SUMMARY|failed|FAIL' "$work/memcheck.log" | tail -n 5
fi
[ "$timing" = 1 ] || { rm -rf "$work"; exit 0; }

printf '%-44s %12s %10s\n' "run ($card, $epochs epochs)" "samples/s" "epoch s" >"$table"

gt_run() { # label tf32(0|1) args...
    local label=$1 tf=$2
    shift 2
    gt_run_bin "$bin" "$label" "$tf" "$@"
    [ -z "$base" ] || gt_run_bin "$base" "$label (baseline)" "$tf" "$@"
}

gt_run_bin() { # binary label tf32(0|1) args...
    local bin=$1 label=$2 tf=$3
    shift 3
    local log="$work/$(echo "$label" | tr -c 'A-Za-z0-9' _).jsonl"
    local tfa=()
    [ "$tf" = 1 ] && tfa=(--tf32)
    local rc=0
    "$bin" --data "$data" --gpus "$gpu" --epochs "$epochs" --log "$log" \
        --quiet --no-progress "${tfa[@]}" "$@" || rc=$?
    if [ "$rc" -ne 0 ]; then # one failed row does not end the check; the table says so
        printf '%-44s %12s %10s\n' "gputrain $label" "exit $rc" "-" >>"$table"
        return 0
    fi
    printf '%-44s %12s %10s\n' "gputrain $label" "$(gt_median_sps "$log")" \
        "$(gt_median_epoch "$log")" >>"$table"
}

torch_run() { # label batch tf32 args...
    local label=$1 batch=$2 tf=$3
    shift 3
    local out="$work/torch-$(echo "$label" | tr -c 'A-Za-z0-9' _).jsonl" sps
    CUDA_VISIBLE_DEVICES=$gpu python3 "$root/tools/torch_lenet.py" --data "$data" --mode single \
        --gpus 1 --batch "$batch" --epochs "$epochs" --opt sgd --lr 0.05 --graph 1 --tf32 "$tf" \
        --out "$out" "$@" >"$out.txt" 2>&1 || { echo "pytorch $label: failed (see below)";
        tail -n 5 "$out.txt"; return 0; }
    sps=$(grep '^{' "$out.txt" | tail -1 | sed 's/.*"samples_per_s_steady": \([0-9.]*\).*/\1/')
    printf '%-44s %12s %10s\n' "pytorch graph $label" "$sps" "-" >>"$table"
}

echo "== cnn-wide allreduce batch 128"
for tf in 0 1; do
    gt_run "cnn-wide b128 tf32=$tf" "$tf" --model cnn-wide --mode allreduce --batch 128
done
echo "== lenet5 (fused kernels)"
for b in 64 256; do
    gt_run "lenet5 allreduce b$b" 0 --mode allreduce --batch "$b"
done
gt_run "lenet5 hogwild b64" 0 --batch 64
if [ -f "$root/tools/torch_lenet.py" ]; then
    for tf in 0 1; do
        torch_run "lenet5 b64 tf32=$tf" 64 "$tf"
        torch_run "lenet5 b256 tf32=$tf" 256 "$tf"
        if python3 "$root/tools/torch_lenet.py" --help 2>/dev/null | grep -q -- '--model'; then
            torch_run "cnn-wide b128 tf32=$tf" 128 "$tf" --model cnn-wide
        fi
    done
else
    echo "(tools/torch_lenet.py not in this tree: no PyTorch rows)"
fi

# summary_num LOG KEY: the summary record's number KEY, or "-" where the log has none (an older
# gputrain's log has no startup_s).
summary_num() {
    local v
    v=$(grep '"type":"summary"' "$1" | tail -1 | grep -o "\"$2\":[-0-9.e+]*" | cut -d: -f2)
    echo "${v:--}"
}

# The whole process timed from outside, and its parts as the log gives them: start-up (launch to
# training: data load, devices, libraries), training (the summary's run_wall_s) and the rest
# (the last evaluation, closing the devices, exit).
wall_run() { # binary label
    local start end startup train sdata sdev
    start=$(date +%s.%N)
    "$1" --data "$data" --gpus "$gpu" --epochs 10 --mode allreduce --batch 64 --quiet \
        --no-progress --log "$work/wall.jsonl"
    end=$(date +%s.%N)
    startup=$(summary_num "$work/wall.jsonl" startup_s)
    sdata=$(summary_num "$work/wall.jsonl" startup_data_s)
    sdev=$(summary_num "$work/wall.jsonl" startup_devices_s)
    train=$(summary_num "$work/wall.jsonl" run_wall_s)
    awk -v s="$start" -v e="$end" -v u="$startup" -v t="$train" -v n="$2" -v d="$sdata" -v v="$sdev" 'BEGIN {
        printf "%-44s %12s %10.3f\n", n ": launch to exit (s)", "-", e - s;
        rest = (u == "-" || t == "-") ? "-" : sprintf("%.3f", e - s - u - t);
        printf "%-44s %12s %10s\n", "  start-up / training / rest (s)", u " / " t, rest;
        printf "%-44s %12s %10s\n", "  start-up: data load beside devices (s)", d " / " v, "-" }' >>"$table"
}
echo "== lenet5 10 epochs, launch to exit"
for i in $(seq "$wall_runs"); do # alternating, so that a slow moment of the host hits both
    wall_run "$bin" "lenet5 10 epochs"
    [ -z "$base" ] || wall_run "$base" "lenet5 10 epochs (baseline)"
done

echo
echo "== $card, commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), test_cuda_parity $parity"
cat "$table"
rm -rf "$work"
