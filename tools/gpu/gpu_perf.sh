#!/usr/bin/env bash
# gpu_perf.sh - one-GPU throughput of gputrain next to the PyTorch reference, in the same run on
# the same card, and the 10-epoch accuracy of the reference recipe. Writes
# OUT/perf-<card>-<date>.md (table with ratios, command, card, date, commit) and .csv.
# Every run of both takes the same input step, --normalize NORM (auto, the default of both: each
# channel (x/255 - mean) / std with the training split's statistics; none: x/255).
#
# Usage: tools/gpu_perf.sh [--data DIR] [--torch-ref tools/torch_lenet.py] [--bin build/gputrain]
#                          [--gpu 0] [--epochs 5] [--normalize auto|none] [--out results]
# --data defaults to datasets/fashion-mnist, then /usr/share/datasets/fashion-mnist.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=gpu_perf
cmd="$0 $*"
data="" ref="$root/tools/torch_lenet.py" bin="$root/build/gputrain" gpu=0 epochs=5 out="$root/results" norm=auto
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --data | --torch-ref | --bin | --gpu | --epochs | --normalize | --out) need_value "$1" $# ;;&
        --data) data=$2; shift 2 ;;
        --torch-ref) ref=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --gpu) gpu=$2; shift 2 ;;
        --epochs) check_uint "$1" "$2"; epochs=$2; shift 2 ;;
        --normalize) norm=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ -f "$ref" ] || usage_error "--torch-ref: '$ref' not found"
case "$norm" in auto | none) ;; *) usage_error "--normalize: '$norm' is not auto or none" ;; esac
gt_find_data
gt_card_meta "$gpu"
mkdir -p "$out"
work=$(mktemp -d)
csv="$out/perf-$tag-$date.csv"
md="$out/perf-$tag-$date.md"
echo "framework,config,batch,epochs,samples_per_s,median_epoch_s,test_acc,command" >"$csv"

gt_last_acc() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"test_acc":\([0-9.]*\).*/\1/'; }

run_gt() { # label batch epochs extra-args...
    local label=$1 batch=$2 ep=$3
    shift 3
    local log="$work/$label.jsonl"
    local c=("$bin" --data "$data" --gpus "$gpu" --batch "$batch" --epochs "$ep" --log "$log" --quiet --no-progress --normalize "$norm" "$@")
    "${c[@]}"
    local med sps
    med=$(gt_median_epoch "$log")
    sps=$(gt_median_sps "$log")
    echo "gputrain,$label,$batch,$ep,$sps,$med,$(gt_last_acc "$log"),${c[*]}" >>"$csv"
    echo "gputrain $label b$batch: $sps samples/s (median epoch $med s), acc $(gt_last_acc "$log")"
}

run_torch() { # label batch epochs extra-args...
    local label=$1 batch=$2 ep=$3
    shift 3
    local c=(python3 "$ref" --data "$data" --mode single --gpus 1 --batch "$batch" --epochs "$ep" --normalize "$norm" "$@")
    CUDA_VISIBLE_DEVICES=$gpu "${c[@]}" >"$work/$label.out" 2>&1
    local line sps acc med
    line=$(grep '^{' "$work/$label.out" | tail -1)
    sps=$(echo "$line" | sed 's/.*"samples_per_s_steady": \([0-9.]*\).*/\1/')
    acc=$(echo "$line" | sed 's/.*"test_acc": \[\([^]]*\)\].*/\1/' | awk -F', ' '{ print $NF }')
    med=$(awk -v n="$((60000 / batch * batch))" -v s="$sps" 'BEGIN { printf "%.4f", n / s }')
    echo "pytorch,$label,$batch,$ep,$sps,$med,$acc,${c[*]}" >>"$csv"
    echo "pytorch $label b$batch: $sps samples/s, acc $acc"
}

run_gt hogwild 64 "$epochs"
run_gt hogwild 256 "$epochs" --lr 0.1
run_gt hogwild-overlap 64 "$epochs" --overlap
run_gt hogwild-overlap 256 "$epochs" --lr 0.1 --overlap
run_gt sync 64 "$epochs" --mode sync
run_torch eager 64 "$epochs"
run_torch graph 64 "$epochs" --graph 1
run_torch graph 256 "$epochs" --graph 1 --lr 0.1
run_gt reference-recipe-10ep 64 10 --lr 0.05 --momentum 0.9 --mode hogwild
run_gt reference-recipe-10ep-overlap 64 10 --lr 0.05 --momentum 0.9 --mode hogwild --overlap
run_gt overlap-m0.5-10ep 64 10 --lr 0.05 --momentum 0.5 --mode hogwild --overlap
run_torch reference-recipe-10ep 64 10 --lr 0.05

{
    echo "# One-GPU throughput: gputrain vs PyTorch"
    echo
    echo "Card: $card (GPU $gpu). Date: $date. Commit: $commit."
    echo "Command: \`$cmd\`"
    echo
    echo "Input step of every run, both frameworks: --normalize $norm."
    echo
    echo "samples/s = training samples of an epoch / median epoch time after the first (both sides)."
    echo
    echo "| framework | config | batch | epochs | samples/s | median epoch s | test acc |"
    echo "|---|---|---|---|---|---|---|"
    tail -n +2 "$csv" | awk -F, '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }'
    echo
    echo "Ratios (gputrain / PyTorch, same card, same call):"
    echo
    awk -F, 'NR > 1 { v[$1 "," $2 "," $3] = $5 } END {
        printf "- hogwild b64 / eager b64: %.2fx\n", v["gputrain,hogwild,64"] / v["pytorch,eager,64"]
        printf "- hogwild b64 / CUDA graph b64: %.2fx\n", v["gputrain,hogwild,64"] / v["pytorch,graph,64"]
        printf "- hogwild b256 / CUDA graph b256: %.2fx\n", v["gputrain,hogwild,256"] / v["pytorch,graph,256"]
        printf "- hogwild --overlap b64 / eager b64: %.2fx\n", v["gputrain,hogwild-overlap,64"] / v["pytorch,eager,64"]
        printf "- hogwild --overlap b64 / CUDA graph b64: %.2fx\n", v["gputrain,hogwild-overlap,64"] / v["pytorch,graph,64"]
        printf "- hogwild --overlap b256 / CUDA graph b256: %.2fx\n", v["gputrain,hogwild-overlap,256"] / v["pytorch,graph,256"]
    }' "$csv"
    echo
    echo "Each row's exact command is in $(basename "$csv")."
} >"$md"
cat "$md"
rm -rf "$work"
