#!/usr/bin/env bash
# mpi_gpu.sh - the cost of crossing processes, on one host with 4 GPUs: 1 process x 4 GPUs
# against 2 processes x 2 GPUs under mpirun (GPUs 0,1 and 2,3), in sync and allreduce mode, with
# the same global batch, so the two layouts compute the same thing. Prints and writes
# OUT/mpi-<card>-<date>.md: samples/s (median epoch after the first, and the whole run), the
# 2x2 / 1x4 throughput ratio, and test accuracy, with the command, card, date and commit.
#
# Needs a gputrain built with CUDA, NCCL and MPI (built here into build-mpi when --bin is not
# given) and Open MPI's mpirun (MPIRUN=... for another launcher command).
#
# Usage: tools/mpi_gpu.sh [--data DIR] [--bin PATH] [--models "lenet5 cnn-wide"] [--epochs 5]
#                         [--args "more gputrain options"] [--name SUFFIX] [--out results]
# --args go to every run (e.g. a recipe); --name SUFFIX writes mpi-<card>-<date>-SUFFIX.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=mpi_gpu
cmd="$0 $*"
data="" bin="" models="lenet5 cnn-wide" epochs=5 out="$root/results" extra="" name=""
while [ $# -gt 0 ]; do
    case "$1" in
        --data | --bin | --models | --epochs | --out | --args | --name) need_value "$1" $# ;;&
        --data) data=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --args) extra=$2; shift 2 ;;
        --name) name=-$2; shift 2 ;;
        --help) gt_usage "$0"; exit 0 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
gt_find_data
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null ||
    { echo "mpi_gpu: no '$mpirun' here (Debian/Ubuntu: apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
ngpu=$(nvidia-smi -L | wc -l)
[ "$ngpu" -ge 4 ] || { echo "mpi_gpu: needs 4 GPUs, this host has $ngpu" >&2; exit 1; }
if [ -z "$bin" ]; then
    bin="$root/build-mpi/gputrain"
    cmake -S "$root" -B "$root/build-mpi" -DCMAKE_BUILD_TYPE=Release -DGT_CUDA=ON -DGT_MPI=ON >/dev/null
    cmake --build "$root/build-mpi" -j"$(nproc)" --target gputrain >/dev/null
fi
"$bin" --version | grep -qw nccl && "$bin" --version | grep -qw mpi ||
    { echo "mpi_gpu: $bin lacks NCCL or MPI: $("$bin" --version)" >&2; exit 1; }

gt_card_meta 0
mkdir -p "$out"
md="$out/mpi-$tag-$date$name.md"
work=$(mktemp -d)
rows="$work/rows"
: >"$rows"

# Open MPI: allow root; no binding (one process drives several GPUs from several threads, and a
# process bound to one core would starve them); NVLink multicast stays off in NCCL.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
launch=("$mpirun")
"$mpirun" --version 2>&1 | grep -q "Open MPI" && launch+=(--bind-to none -x NCCL_NVLS_ENABLE)
# Rank r drives GPUs 2r and 2r+1.
per_rank='r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}; exec "$0" --gpus $((2 * r)),$((2 * r + 1)) "$@"'

field() { grep "\"type\":\"$2\"" "$1" | tail -1 | sed "s/.*\"$3\":\([0-9.]*\).*/\1/"; }

for model in $models; do
    batch=64
    [ "$model" = cnn-wide ] && batch=128
    for mode in sync allreduce; do
        for layout in 1x4 2x2; do
            log="$work/$model-$mode-$layout.jsonl"
            args=(--data "$data" --model "$model" --mode "$mode" --batch "$batch" --epochs "$epochs"
                  --log "$log" --quiet --no-progress $extra)
            if [ "$layout" = 1x4 ]; then
                c=("$bin" --gpus 0,1,2,3 "${args[@]}")
            else
                c=("${launch[@]}" -np 2 bash -c "$per_rank" "$bin" "${args[@]}")
            fi
            if ! "${c[@]}" >"$work/out" 2>&1; then
                echo "$model $mode $layout failed: $(grep -m1 gputrain "$work/out" || tail -1 "$work/out")"
                echo "| $model | $mode | $layout | failed | - | - | \`${c[*]}\` |" >>"$rows"
                continue
            fi
            med=$(gt_median_sps "$log") run=$(field "$log" summary samples_per_s) acc=$(field "$log" eval test_acc)
            echo "$model $mode $layout: $med samples/s (median epoch), $run (whole run), test acc $acc"
            echo "| $model | $mode | $layout | $med | $run | $acc | \`${c[*]}\` |" >>"$rows"
        done
    done
done

{
    echo "# Crossing processes: 1 process x 4 GPUs vs 2 processes x 2 GPUs (mpirun)"
    echo
    echo "Card: $ngpu x $card, one host. Date: $date. Commit: $commit. Epochs per run: $epochs."
    [ -n "$extra" ] && echo "Options added to every run: \`$extra\`."
    echo "Command: \`$cmd\`"
    echo
    echo "Both layouts train the same global batch (4 x the per-GPU batch) on the same data and seed;"
    echo "sync sums the gradient on the host (in 2x2 also through MPI_Allreduce between the processes),"
    echo "allreduce sums on the GPUs: in 1x4 with the peer-to-peer all-reduce of one process, in 2x2"
    echo "with one NCCL communicator over the 4 GPUs. samples/s: median epoch after the first"
    echo "(from the log's evaluation points) and whole run (the summary line). 2x2/1x4: the ratio of"
    echo "median-epoch samples/s, the throughput kept when the GPUs are split over two processes."
    echo
    echo "| model | mode | layout | samples/s (median epoch) | samples/s (run) | test acc | command |"
    echo "|---|---|---|---|---|---|---|"
    cat "$rows"
    echo
    echo "| model | mode | 2x2/1x4 | test acc 1x4 | test acc 2x2 |"
    echo "|---|---|---|---|---|"
    awk -F' [|] ' '{ sub(/^[|] /, ""); k = $1 " | " $2; sps[k, $3] = $4 + 0; acc[k, $3] = $6
            if (!(k in seen)) { seen[k] = 1; keys[++n] = k } }
        END { for (i = 1; i <= n; i++) { k = keys[i]; one = sps[k, "1x4"]; two = sps[k, "2x2"]
              r = (one > 0 && two > 0) ? sprintf("%.3f", two / one) : ""
              printf "| %s | %s | %s | %s |\n", k, r, acc[k, "1x4"], acc[k, "2x2"] } }' "$rows"
} >"$md"
echo
cat "$md"
rm -rf "$work"
