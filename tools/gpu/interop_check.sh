#!/usr/bin/env bash
# interop_check.sh - checkpoints interchange with PyTorch to the last test sample: a gputrain
# lenet5 checkpoint evaluated by the PyTorch reference LeNet5, and PyTorch-trained weights
# evaluated by `gputrain eval`. Writes OUT/interop-<card>-<date>.md with command, card and date.
# Both sides train with the input step --normalize NORM (auto, the default: each channel
# (x/255 - mean) / std with the training split's statistics; none: x/255), and each checkpoint
# carries it (metadata input_norm), so either evaluator feeds the weights what they trained on.
#
# Usage: tools/interop_check.sh [--data DIR] [--torch-ref tools/torch_lenet.py] [--bin build/gputrain]
#                               [--normalize auto|none] [--out results]
# --data defaults to datasets/fashion-mnist, then /usr/share/datasets/fashion-mnist.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=interop_check
cmd="$0 $*"
data="" ref="$root/tools/torch_lenet.py" bin="$root/build/gputrain" out="$root/results" norm=auto
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --data | --torch-ref | --bin | --normalize | --out) need_value "$1" $# ;;&
        --data) data=$2; shift 2 ;;
        --torch-ref) ref=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --normalize) norm=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ -f "$ref" ] || usage_error "--torch-ref: '$ref' not found"
case "$norm" in auto | none) ;; *) usage_error "--normalize: '$norm' is not auto or none" ;; esac
gt_find_data
card=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1 || true)
card=${card:-cpu}
tag=$(echo "$card" | tr ' ' '-' | tr -cd 'A-Za-z0-9._-')
date=$(date -u +%Y-%m-%d)
work=$(mktemp -d)
mkdir -p "$out"
gpus=0
[ "$card" = cpu ] && gpus=cpu:1

correct_gt() { "$bin" eval --data "$data" --gpus "$gpus" --checkpoint "$1" | sed 's/.*(\([0-9]*\)\/.*/\1/'; }
correct_pt() { sed 's/^correct \([0-9]*\) of.*/\1/'; }
input_norm() { # a checkpoint's metadata input_norm, or "none" (x/255)
    python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import gputrain_torch as g
print(g.read_safetensors(sys.argv[2])[0].get("input_norm", "none"))' "$root/tools" "$1"
}

"$bin" --data "$data" --gpus "$gpus" --epochs 10 --normalize "$norm" --checkpoint "$work/gt.safetensors" --quiet --no-progress
gt_own=$(correct_gt "$work/gt.safetensors")
gt_in_torch=$(python3 "$root/tools/interop.py" to-torch "$work/gt.safetensors" --data "$data" --ref "$ref" | correct_pt)
pt_own=$(python3 "$root/tools/interop.py" from-torch "$work/pt.safetensors" --data "$data" --ref "$ref" --epochs 2 --normalize "$norm" | correct_pt)
pt_in_gt=$(correct_gt "$work/pt.safetensors")
verdict() { [ "$1" = "$2" ] && echo "equal" || echo "DIFFERENT"; }
{
    echo "# Checkpoint interoperability with PyTorch"
    echo
    echo "Card: $card. Date: $date. Command: \`$cmd\`"
    echo
    echo "Input step: --normalize $norm on both sides; input_norm of the gputrain checkpoint" \
        "$(input_norm "$work/gt.safetensors"), of the PyTorch one $(input_norm "$work/pt.safetensors")."
    echo
    echo "| weights | evaluated by gputrain eval | evaluated by PyTorch (reference LeNet5) | |"
    echo "|---|---|---|---|"
    echo "| gputrain lenet5, 10 epochs (SGD lr 0.05 m 0.9, batch 64) | $gt_own / 10000 | $gt_in_torch / 10000 | $(verdict "$gt_own" "$gt_in_torch") |"
    echo "| PyTorch LeNet5, 2 epochs (SGD lr 0.05 m 0.9, batch 64) | $pt_in_gt / 10000 | $pt_own / 10000 | $(verdict "$pt_in_gt" "$pt_own") |"
} >"$out/interop-$tag-$date.md"
cat "$out/interop-$tag-$date.md"
rm -rf "$work"
[ "$gt_own" = "$gt_in_torch" ] && [ "$pt_own" = "$pt_in_gt" ]
