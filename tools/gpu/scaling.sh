#!/usr/bin/env bash
# scaling.sh - multi-GPU scaling of gputrain (hogwild with and without --overlap, sync, allreduce;
# lenet5 at batch 64 per GPU
# and cnn-wide at 128) at 1, 2, 4 GPUs, next to PyTorch DDP on the same GPUs in the same call.
# Writes OUT/scaling-<card>-<date>.md and .csv: samples/s (median epoch after the first), scaling
# efficiency against the same mode on one GPU, and test accuracy after the run.
#
# Usage: tools/scaling.sh [--data DIR] [--torch-ref tools/torch_lenet.py] [--bin build/gputrain]
#                         [--epochs 5] [--gpus "1 2 4"] [--out results]
#                         [--modes "hogwild hogwild-overlap sync ssp-s1 allreduce"]
#                         [--models "lenet5 cnn-wide"] [--no-torch]
# Mode labels: hogwild, hogwild-overlap, hogwild-lockfree, sync, ssp-sN (--staleness N),
# local-kN (--sync-every N), allreduce.
# --data defaults to datasets/fashion-mnist, then /usr/share/datasets/fashion-mnist.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=scaling
cmd="$0 $*"
data="" ref="$root/tools/torch_lenet.py" bin="$root/build/gputrain" epochs=5 counts="1 2 4" out="$root/results"
labels="hogwild hogwild-overlap sync ssp-s1 allreduce" models="lenet5 cnn-wide" torch=1
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --data | --torch-ref | --bin | --epochs | --gpus | --out | --modes | --models) need_value "$1" $# ;;&
        --modes) labels=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        --no-torch) torch=0; shift ;;
        --data) data=$2; shift 2 ;;
        --torch-ref) ref=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --epochs) check_uint "$1" "$2"; epochs=$2; shift 2 ;;
        --gpus) counts=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ "$torch" -eq 0 ] || [ -f "$ref" ] || usage_error "--torch-ref: '$ref' not found"
for label in $labels; do
    case "$label" in hogwild | hogwild-overlap | hogwild-lockfree | sync | allreduce) ;;
        ssp-s[0-9]* | local-k[0-9]*) ;; *) usage_error "--modes: unknown mode '$label'" ;; esac
done
for model in $models; do
    case "$model" in lenet5 | cnn-wide) ;; *) usage_error "--models: unknown model '$model' (lenet5, cnn-wide)" ;; esac
done
gt_find_data
gt_card_meta 0
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$out"
work=$(mktemp -d)
csv="$out/scaling-$tag-$date.csv"
md="$out/scaling-$tag-$date.md"
echo "framework,model,mode,gpus,batch_per_gpu,samples_per_s,median_epoch_s,test_acc,command" >"$csv"


gpu_list() { seq -s, 0 $(($1 - 1)); }

for g in $counts; do
    [ "$g" -le "$ngpu" ] || continue
    for model in $models; do
        batch=64
        [ "$model" = cnn-wide ] && batch=128
        for label in $labels; do
            case "$label" in
                hogwild-overlap) mode=hogwild extra=(--overlap) ;;
                hogwild-lockfree) mode=hogwild extra=(--stripes 0) ;;
                ssp-s*) mode=ssp extra=(--staleness "${label#ssp-s}") ;;
                local-k*) mode=local extra=(--sync-every "${label#local-k}") ;;
                *) mode=$label extra=() ;;
            esac
            log="$work/$model-$label-$g.jsonl"
            c=("$bin" --data "$data" --gpus "$(gpu_list "$g")" --model "$model" --mode "$mode" --batch "$batch"
               --epochs "$epochs" --log "$log" --quiet --no-progress "${extra[@]}")
            if ! "${c[@]}" 2>"$work/err"; then
                echo "gputrain,$model,$label,$g,$batch,,,failed: $(tr ',' ';' <"$work/err" | head -1),${c[*]}" >>"$csv"
                continue
            fi
            med=$(gt_median_epoch "$log")
            sps=$(gt_median_sps "$log")
            acc=$(grep '"type":"eval"' "$log" | tail -1 | sed 's/.*"test_acc":\([0-9.]*\).*/\1/')
            echo "gputrain,$model,$label,$g,$batch,$sps,$med,$acc,${c[*]}" >>"$csv"
            echo "gputrain $model $label x$g: $sps samples/s, acc $acc"
        done
    done
    [ "$torch" -eq 1 ] || continue
    c=(python3 "$ref" --data "$data" --mode ddp --gpus "$g" --batch 64 --epochs "$epochs")
    [ "$g" -eq 1 ] && c=(python3 "$ref" --data "$data" --mode single --gpus 1 --batch 64 --epochs "$epochs")
    if "${c[@]}" >"$work/ddp$g.out" 2>&1; then
        line=$(grep '^{' "$work/ddp$g.out" | tail -1)
        sps=$(echo "$line" | sed 's/.*"samples_per_s_steady": \([0-9.]*\).*/\1/')
        acc=$(echo "$line" | sed 's/.*"test_acc": \[\([^]]*\)\].*/\1/' | awk -F', ' '{ print $NF }')
        echo "pytorch,lenet5,ddp,$g,64,$sps,,$acc,${c[*]}" >>"$csv"
        echo "pytorch ddp x$g: $sps samples/s, acc $acc"
    else
        echo "pytorch,lenet5,ddp,$g,64,,,failed,${c[*]}" >>"$csv"
    fi
done

{
    echo "# Multi-GPU scaling: gputrain vs PyTorch DDP"
    echo
    echo "Card: $ngpu x $card. Date: $date. Commit: $commit. Epochs per run: $epochs."
    echo "Command: \`$cmd\`"
    echo
    echo "samples/s = training samples per epoch / median epoch time after the first; efficiency ="
    echo "samples/s at G GPUs / (G x the same mode's samples/s at 1 GPU)."
    echo
    echo "| framework | model | mode | GPUs | batch/GPU | samples/s | efficiency | test acc |"
    echo "|---|---|---|---|---|---|---|---|"
    awk -F, 'NR > 1 { key = $1 "," $2 "," $3; if ($4 == 1) one[key] = $6; row[NR] = $0 }
        END { for (i = 2; i <= NR; i++) { split(row[i], f, ","); key = f[1] "," f[2] "," f[3];
            eff = (one[key] > 0 && f[6] > 0) ? sprintf("%.2f", f[6] / (f[4] * one[key])) : "";
            printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], eff, f[8] } }' "$csv"
    echo
    echo "Each row's exact command is in $(basename "$csv")."
} >"$md"
cat "$md"
rm -rf "$work"
