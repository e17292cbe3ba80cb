#!/usr/bin/env bash
# resnet_bench.sh - resnet20 and resnet18 throughput of gputrain beside the PyTorch reference
# (tools/torch_resnet.py: eager and whole-step CUDA graph, fp32 and bf16 autocast with
# channels-last), on synthetic 3x32x32 data (50000 images, 10 classes), batch 256 per GPU: each
# model on one GPU, and resnet18 data-parallel on every GPU (gputrain --mode allreduce, PyTorch
# DDP, eager only). Prints a table of images/s and gputrain's ratio to each PyTorch column; every
# figure comes from this call on this host. gputrain's figure is an epoch's samples over its median
# epoch time after the first (tools/lib.sh), which includes its end-of-epoch evaluation of 10000
# test images; PyTorch's leaves evaluation out (it has no test split on synthetic data).
#
# Usage: tools/gpu/resnet_bench.sh [--bin BIN] [--epochs 3] [--batch 256] [--gpus N] [--no-torch]
#                                  [--store-modes "hogwild sync ssp"] [--only-store]
#                                  [--precisions "fp32 bf16"]
#   --bin BIN   a built gputrain (default: build build-cuda here first)
#   --precisions LIST  the rows' precisions, fp32 and/or bf16 (default: both)
#   --gpus N    GPUs for the data-parallel rows (default: all that nvidia-smi lists)
#   --store-modes LIST  also train resnet18 in bf16 with these modes through the parameter store
#               (--store-step: pull, push and the host's apply in every step) on 1 and N GPUs,
#               and print a second table: images/s, the ratio to allreduce on as many GPUs, and
#               each mode's N-GPU rate over its 1-GPU rate (plus its step breakdown: pull,
#               device, push/apply, wait, from the summary's worker lines); an entry
#               MODE,FLAG,... adds gputrain flags to that mode's rows (e.g. hogwild,--store-parts=0)
#   --only-store  only the resnet18 bf16 allreduce rows and the store modes' (no PyTorch)
# gputrain's precision flags come from the environment, so that they can follow its command line:
#   GT_FP32_FLAGS  flags of the fp32 rows (default: none, exact float32)
#   GT_BF16_FLAGS  flags of the bf16 rows (default: $GT_PRECISION_FLAG; empty: no gputrain bf16 rows)
#   GT_EXTRA_FLAGS flags of every gputrain row (default: none)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=resnet_bench
bin="" epochs=3 batch=256 ngpus="" torch=1 store_modes="" only_store=0 precisions="fp32 bf16"
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --bin | --epochs | --batch | --gpus | --store-modes | --precisions) need_value "$1" $# ;;&
        --precisions)
            for p in $2; do
                case "$p" in fp32 | bf16) ;; *) usage_error "--precisions: '$p' is not fp32 or bf16" ;; esac
            done
            [ -n "${2// /}" ] || usage_error "--precisions: empty"
            precisions=$2; shift 2 ;;
        --store-modes) store_modes=$2; shift 2 ;;
        --only-store) only_store=1; torch=0; shift ;;
        --bin) bin=$2; shift 2 ;;
        --epochs) check_uint "$1" "$2"; epochs=$2; shift 2 ;;
        --batch) check_uint "$1" "$2"; batch=$2; shift 2 ;;
        --gpus) check_uint "$1" "$2"; ngpus=$2; shift 2 ;;
        --no-torch) torch=0; shift ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ "$epochs" -ge 2 ] || usage_error "--epochs: at least 2 (the first epoch is left out of the median)"
fp32_flags=${GT_FP32_FLAGS:-} bf16_flags=${GT_BF16_FLAGS:-${GT_PRECISION_FLAG:-}} extra=${GT_EXTRA_FLAGS:-}
if [ -z "$bin" ]; then
    echo "== build (build-cuda)"
    cmake -S "$root" -B "$root/build-cuda" -DCMAKE_BUILD_TYPE=Release -DGT_CUDA=ON -DGT_MPI=OFF >/dev/null
    cmake --build "$root/build-cuda" -j"$(nproc)" --target gputrain >/dev/null
    bin="$root/build-cuda/gputrain"
fi
[ -x "$bin" ] || usage_error "--bin: '$bin' is not an executable"
ngpus=${ngpus:-$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)}
gpu_list=$(seq -s, 0 $((ngpus - 1)))
gt_card_meta 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A sps # "impl|model|gpus|precision" -> images/s, or "exit N", or "-"

# run_gt ROW-KEY MODEL GPUS FLAGS [MODE]: one gputrain run (allreduce unless MODE), its images/s
# (or its exit status) into sps.
run_gt() {
    local key="gputrain|$1" log="$work/gt-${1//|/_}.jsonl" rc=0 mode=${5:-allreduce}
    # shellcheck disable=SC2086 # the flag variables are word lists on purpose
    "$bin" --model "$2" --data synthetic:3x32x32:10 --gpus "$3" --mode "$mode" --batch "$batch" \
        --epochs "$epochs" --log "$log" --no-progress $extra $4 >"$log.txt" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        sps[$key]="exit $rc"
        echo "gputrain $1: exit $rc: $(tail -n 2 "$log.txt" | tr '\n' ' ')"
    else
        sps[$key]=$(gt_median_sps "$log")
        echo "gputrain $1: ${sps[$key]} images/s"
    fi
}

# run_pt ROW-KEY MODEL GPUS ARGS...: one torch_resnet.py run (eager or graph in the key).
run_pt() {
    local key="$1" model=$2 n=$3 out="$work/pt-${1//|/_}.txt"
    shift 3
    if python3 "$root/tools/torch_resnet.py" --model "$model" --synthetic 50000 --shape 3x32x32 --gpus "$n" \
        --batch "$batch" --epochs "$epochs" "$@" >"$out" 2>&1; then
        sps[$key]=$(grep '^{' "$out" | tail -1 | sed 's/.*"samples_per_s_steady": \([0-9.]*\).*/\1/')
        echo "pytorch $key: ${sps[$key]} images/s"
    else
        sps[$key]="failed"
        echo "pytorch $key: failed: $(tail -n 3 "$out" | tr '\n' ' ')"
    fi
}

rows=()
if [ "$only_store" -eq 1 ]; then
    rows+=("resnet18|1|bf16")
    [ "$ngpus" -gt 1 ] && rows+=("resnet18|$ngpus|bf16")
else
    for model in resnet20 resnet18; do
        for p in $precisions; do rows+=("$model|1|$p"); done
    done
    if [ "$ngpus" -gt 1 ]; then
        for p in $precisions; do rows+=("resnet18|$ngpus|$p"); done
    fi
fi
for row in "${rows[@]}"; do
    IFS='|' read -r model n prec <<<"$row"
    gpus=0
    [ "$n" -gt 1 ] && gpus=$gpu_list
    flags=$fp32_flags
    [ "$prec" = bf16 ] && flags=$bf16_flags
    if [ "$prec" = bf16 ] && [ -z "$bf16_flags" ]; then
        sps["gputrain|$row"]="-"
    else
        run_gt "$row" "$model" "$gpus" "$flags"
    fi
    [ "$torch" = 1 ] || continue
    targs=(--amp fp32)
    [ "$prec" = bf16 ] && targs=(--amp bf16 --channels-last 1)
    run_pt "eager|$row" "$model" "$n" "${targs[@]}"
    [ "$n" -gt 1 ] || run_pt "graph|$row" "$model" "$n" "${targs[@]}" --graph 1
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
echo
echo "== $card x$ngpus, commit $commit, $(date -u +%Y-%m-%dT%H:%MZ); synthetic 3x32x32, batch $batch per GPU, $epochs epochs"
echo "   gputrain fp32 flags: '${fp32_flags}', bf16 flags: '${bf16_flags}'; PyTorch bf16: autocast + channels-last"
printf '%-22s %12s %12s %12s %9s %9s\n' "images/s" gputrain "torch eager" "torch graph" "gt/eager" "gt/graph"
for row in "${rows[@]}"; do
    IFS='|' read -r model n prec <<<"$row"
    g=${sps["gputrain|$row"]:--} e=${sps["eager|$row"]:--} c=${sps["graph|$row"]:--}
    printf '%-22s %12s %12s %12s %9s %9s\n' "$model ${n}GPU $prec" "$g" "$e" "$c" "$(ratio "$g" "$e")" "$(ratio "$g" "$c")"
done

[ -n "$store_modes" ] || exit 0
# The store modes: resnet18, bf16, through the store in every step, on 1 and N GPUs.
[ -n "$bf16_flags" ] || usage_error "--store-modes: the rows are bf16; set GT_BF16_FLAGS (e.g. --precision bf16)"
counts=(1)
[ "$ngpus" -gt 1 ] && counts+=("$ngpus")
for m in $store_modes; do
    mode=${m%%,*} mflags=${m#"${m%%,*}"}
    for n in "${counts[@]}"; do
        gpus=0
        [ "$n" -gt 1 ] && gpus=$gpu_list
        run_gt "store-$m|$n" resnet18 "$gpus" "$bf16_flags --store-step ${mflags//,/ }" "$mode"
    done
done
echo
echo "== resnet18 bf16 through the store (--store-step), $card x$ngpus, batch $batch per GPU"
printf '%-24s %6s %12s %12s %10s  %s\n' mode GPUs images/s "/allreduce" "/own 1GPU" "worker 0, us a step"
for m in $store_modes; do
    for n in "${counts[@]}"; do
        g=${sps["gputrain|store-$m|$n"]:--} a=${sps["gputrain|resnet18|$n|bf16"]:--} one=${sps["gputrain|store-$m|1"]:--}
        phases=$(grep -m1 'worker 0 ' "$work/gt-store-${m}_$n.jsonl.txt" 2>/dev/null | sed 's/.*us a step: //')
        printf '%-24s %6s %12s %12s %10s  %s\n' "$m" "$n" "$g" "$(ratio "$g" "$a")" "$(ratio "$g" "$one")" "${phases:--}"
    done
done
