#!/usr/bin/env bash
# bench.sh - the "hogwild vs synchronous" benchmark: one command runs every training mode at every
# worker count for every seed, with the default recipe (what a user gets) and the literal recipe
# (gputrain --literal: the trainer's asynchrony corrections off), the PyTorch reference
# (tools/torch_lenet.py) beside it when PyTorch and GPUs are there, and turns the logs into CSV
# files (tools/jsonl2csv.py), PNG charts (tools/plot.py) and a README with the table. Runs that
# diverged or stalled at chance are marked in the tables and the charts.
#
# Usage: tools/bench.sh [options]
#   --quick            a tiny matrix for testing: 1 seed, 1 epoch, --train-samples 3000
#   --epochs N         epochs per run (default 10 on GPUs, 3 on CPU workers)
#   --model LIST       models, space-separated (default "lenet5"); --cnn-wide adds cnn-wide
#   --cnn-wide         also run cnn-wide (slow on CPU)
#   --modes LIST       only these mode labels (default: all below that the host can run)
#   --seeds LIST       seeds (default 1..10 on GPUs, "1 2 3" on CPU workers)
#   --workers LIST     worker counts (default: 1 2 4 up to the GPUs present; CPU: 1 2)
#   --gpus-max N       use at most N GPUs (default: all that nvidia-smi -L lists)
#   --cpu              CPU workers (--gpus cpu:N) even where GPUs are present
#   --batch N          per-worker batch (default 64)
#   --lr X             learning rate of every mode (default: gputrain's, not passed)
#   --momentum X       SGD momentum of every mode but hogwild-m0.5 (default: gputrain's, not
#                      passed; a value given here counts as set by the user, so the trainer keeps it)
#   --literal          also run every mode with gputrain --literal (the default when the
#                      binary's --help lists that flag)
#   --no-literal       only the default recipe
#   --ema DECAY        also run every mode with gputrain --ema DECAY (the moving average's decay;
#                      0: none), labelled <mode>-emaDECAY (e.g. hogwild-ema0 beside hogwild)
#   --train-samples N  train on the first N samples (default: all)
#   --evals-per-epoch N  evaluations per epoch (default 4)
#   --args "FLAGS"     more gputrain flags for every run, e.g. "--precision bf16" (the recipe's other
#                      settings stay gputrain's; a flag here that the modes set is refused by gputrain)
#   --target ACC       the accuracy whose time-to heads the tables: 0.85 0.87 0.88 0.90 0.93 0.94 0.95
#                      (default 0.87; the residual networks on Fashion-MNIST: 0.93, 0.94)
#   --data DIR         Fashion-MNIST folder (default: datasets/fashion-mnist, then
#                      /usr/share/datasets/fashion-mnist)
#   --bin PATH         gputrain binary (default build/gputrain)
#   --torch-ref PATH   PyTorch reference (default tools/torch_lenet.py)
#   --no-torch         skip the PyTorch reference
#   --out DIR          output folder (default results/bench-<card>-<UTC date>)
#   --parallel         GPUs: run floor(GPUs / workers) runs at a time, each on its own GPUs (an
#                      N-GPU host measures its matrix up to N times sooner; the runs share the
#                      host's CPUs and memory, and the README says the matrix ran this way)
#   --torch-seeds LIST seeds of the PyTorch reference (default: --seeds)
#   --dry-run          print the run commands, run nothing
#   --replot           run nothing: rebuild the CSVs, charts and README of --out DIR from its runs/
#                      (the README from the bench.env the run saved)
#   --help             this text
# A run whose log already ends with its summary and whose exit status was 0 is kept, not rerun, so
# the same command continues an interrupted matrix.
#
# The modes (a documented choice; every mode gets the same lr, batch and seed so that the mode is
# the only difference; the per-worker batch stays --batch, so sync over W workers is one step of
# W x batch at the same lr, and hogwild over W workers makes W times as many updates per sample):
#   hogwild           --mode hogwild (default lock stripes)
#   hogwild-m0.5      --mode hogwild, momentum 0.5: asynchrony acts like extra momentum, so how
#                     does hogwild do with less of it
#   hogwild-lockfree  --mode hogwild --stripes 0 (true Hogwild, no locks)
#   hogwild-overlap   --mode hogwild --overlap (step k+1 begins before step k's push)
#   sync              --mode sync
#   ssp-s2, ssp-s4    --mode ssp --staleness 2 / 4 (ssp-s1, ssp-s3 on request)
#   local-k4          --mode local --sync-every 4
#   allreduce         --mode allreduce (GPUs and a gputrain linked with NCCL only)
# The literal recipe of a mode is labelled <mode>-literal, its run with --ema D <mode>-emaD. A run is "stalled" when its final test
# accuracy is below 1.5x chance (0.15 for 10 classes) and "diverged" when a loss went non-finite
# or the trainer's guard stopped it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/lib.sh"
gt_prog=bench
gt_command_line "$0" "$@"

check_list() {
    local flag=$1 item
    shift
    [ $# -gt 0 ] || usage_error "$flag: empty list"
    for item in "$@"; do check_uint "$flag" "$item"; done
}

# The order of the series in charts and tables: the modes as listed above, their literal recipes,
# PyTorch, then anything else found.
series_order() {
    local m
    for m in $all_modes $extra_modes; do echo "$m"; done
    for m in $all_modes $extra_modes; do echo "$m-literal"; done
    echo pytorch
}

# bench_charts OUT: OUT/{evals,runs,aggregate}.csv, curves/, throughput/ and the PNG charts, from the
# logs in OUT/runs/. A series is labelled with its runs that diverged or stalled ("2/10 stalled");
# plot.py draws it even where it falls below the axis and marks a mean that ends at chance.
bench_charts() {
    local out=$1 tag model w x label name title xlabel ymin backend key
    gt_jsonl2csv "$out/runs" "$out" || die "tools/jsonl2csv.py failed on $out/runs"
    tag=$(basename "$out")
    tag=${tag#bench-}
    local -A text=() seen_model=() seen_w=()
    local models=() ws=() labels=() found=()
    while IFS=, read -r model label w runs div stall backend; do
        key="$model,$label,$w"
        text[$key]=$label
        [ "$div" -eq 0 ] || text[$key]="${text[$key]} ($div/$runs diverged)"
        [ "$stall" -eq 0 ] || text[$key]="${text[$key]} ($stall/$runs stalled)"
        [ -n "${seen_model[$model]:-}" ] || { seen_model[$model]=1; models+=("$model"); }
        [ -n "${seen_w[$w]:-}" ] || { seen_w[$w]=1; ws+=("$w"); }
        found+=("$label")
    done < <(awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
        { print $(c["model"]) "," $(c["label"]) "," $(c["workers"]) "," $(c["runs"]) "," $(c["runs_diverged"]) "," \
            $(c["runs_stalled"]) "," $(c["backend"]) }' "$out/aggregate.csv")
    mapfile -t labels < <({ series_order; printf '%s\n' "${found[@]}"; } | awk '!seen[$0]++' |
        grep -Fx -f <(printf '%s\n' "${found[@]}"))
    mapfile -t ws < <(printf '%s\n' "${ws[@]}" | sort -n)
    backend=$(awk -F, 'NR == 2 { for (k = 1; k <= NF; k++) if (h[k] == "backend") print $k; exit } NR == 1 { split($0, h, ",") }' \
        "$out/aggregate.csv")
    # Quick runs stay far below 0.6; a real benchmark's curves are read above it.
    ymin=$(awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) if ($k == "final_acc_max") c = k; next }
        $c > best { best = $c } END { if (best >= 0.7) print "--ymin 0.6" }' "$out/aggregate.csv")
    for model in "${models[@]}"; do
        for w in "${ws[@]}"; do
            for x in wall_s_mean samples_mean; do
                local series=()
                for label in "${labels[@]}"; do
                    key="$model,$label,$w"
                    [ -f "$out/curves/${model}__${label}__w$w.csv" ] || continue
                    series+=("${text[$key]}=$out/curves/${model}__${label}__w$w.csv:$x:test_acc_mean:test_acc_min:test_acc_max")
                done
                [ ${#series[@]} -gt 0 ] || continue
                if [ "$x" = wall_s_mean ]; then
                    name=acc_vs_time_${model}_w$w.png xlabel="wall time (s)" title="$model: test accuracy vs time, $w workers ($tag)"
                else
                    name=acc_vs_samples_${model}_w$w.png xlabel="samples seen" title="$model: test accuracy vs samples, $w workers ($tag)"
                fi
                # shellcheck disable=SC2086 # ymin is empty or two words
                gt_plot --out "$out/$name" --title "$title" --xlabel "$xlabel" --chance 0.1 $ymin \
                    --ylabel "test accuracy (mean, band min-max over seeds)" "${series[@]}" || die "tools/plot.py failed"
                note "wrote $out/$name"
            done
        done
        local series=()
        for label in "${labels[@]}"; do
            [ -f "$out/throughput/${model}__${label}.csv" ] || continue
            series+=("$label=$out/throughput/${model}__${label}.csv:workers:steady_samples_per_s_mean:steady_samples_per_s_min:steady_samples_per_s_max")
        done
        [ ${#series[@]} -gt 0 ] || continue
        gt_plot --out "$out/throughput_${model}.png" --title "$model: throughput vs workers ($tag)" --logx \
            --xlabel "workers ($backend)" --ylabel "samples/s (median epoch after the first)" "${series[@]}" ||
            die "tools/plot.py failed"
        note "wrote $out/throughput_${model}.png"
    done
}

all_modes="hogwild hogwild-lockfree hogwild-overlap sync ssp-s2 ssp-s4 local-k4 allreduce"
extra_modes="hogwild-m0.5 ssp-s1 ssp-s3"
quick=0 epochs="" models="lenet5" modes="" seeds="" workers="" gpus_max="" force_cpu=0
batch=64 batch_given=0 lr="" momentum="" train_samples="" evals_per_epoch=4 data="" bin="$root/build/gputrain"
extra_args="" target=0.87
torch_ref="$root/tools/torch_lenet.py" no_torch=0 out="" dry_run=0 replot=0 literal=auto parallel=0 torch_seeds="" ema=""

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1; shift ;;
        --epochs) need_value "$1" $#; check_uint "$1" "$2"; epochs=$2; shift 2 ;;
        --model | --models) need_value "$1" $#; models=$2; shift 2 ;;
        --cnn-wide) models="$models cnn-wide"; shift ;;
        --modes) need_value "$1" $#; modes=$2; shift 2 ;;
        --seeds) need_value "$1" $#; seeds=$2; [ -n "$2" ] || usage_error "--seeds: empty list"; shift 2 ;;
        --workers) need_value "$1" $#; workers=$2; shift 2 ;;
        --gpus-max) need_value "$1" $#; check_uint "$1" "$2"; gpus_max=$2; shift 2 ;;
        --cpu) force_cpu=1; shift ;;
        --batch) need_value "$1" $#; check_uint "$1" "$2"; batch=$2; batch_given=1; shift 2 ;;
        --lr) need_value "$1" $#; check_number "$1" "$2"; lr=$2; shift 2 ;;
        --momentum) need_value "$1" $#; check_number "$1" "$2"; momentum=$2; shift 2 ;;
        --train-samples) need_value "$1" $#; check_uint "$1" "$2"; train_samples=$2; shift 2 ;;
        --evals-per-epoch) need_value "$1" $#; check_uint "$1" "$2"; evals_per_epoch=$2; shift 2 ;;
        --args) need_value "$1" $#; extra_args=$2; shift 2 ;;
        --target)
            need_value "$1" $#
            case "$2" in 0.85 | 0.87 | 0.88 | 0.90 | 0.93 | 0.94 | 0.95) target=$2 ;;
                *) usage_error "--target: '$2' is not one of 0.85 0.87 0.88 0.90 0.93 0.94 0.95" ;; esac
            shift 2 ;;
        --data) need_value "$1" $#; data=$2; shift 2 ;;
        --bin) need_value "$1" $#; bin=$2; shift 2 ;;
        --literal) literal=1; shift ;;
        --no-literal) literal=0; shift ;;
        --ema) need_value "$1" $#; check_number "$1" "$2"; ema=$2; shift 2 ;;
        --torch-ref) need_value "$1" $#; torch_ref=$2; shift 2 ;;
        --no-torch) no_torch=1; shift ;;
        --out) need_value "$1" $#; out=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --parallel) parallel=1; shift ;;
        --torch-seeds) need_value "$1" $#; torch_seeds=$2; [ -n "$2" ] || usage_error "--torch-seeds: empty list"; shift 2 ;;
        --replot) replot=1; shift ;;
        --help) gt_usage "$0"; exit 0 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done

# The README of an --out folder, from the settings a run saved in bench.env (bench_save_env).
bench_readme() {
    {
        echo "# Benchmark: hogwild vs synchronous, $card_tag, $date_utc"
        echo
        echo "Written by tools/bench.sh; every number below comes from the logs in runs/ (see runs.csv)."
        echo
        echo "- command: \`$command_line\`"
        echo "- card: $card ($backend workers); $host_cores host CPU cores"
        echo "- date (UTC): $date_utc; commit: $commit"
        echo "- data: $data, $epoch_samples training samples per epoch, $epochs epochs, batch $batch per worker,"
        echo "  lr ${lr:-gputrain default}, momentum ${momentum:-gputrain default} (hogwild-m0.5: 0.5), $evals_per_epoch evaluations per epoch,"
        echo "  seeds ${seed_list[*]}; <mode>-literal runs add gputrain --literal (asynchrony corrections off)"
        [ -z "${extra_args:-}" ] || echo "- every run adds gputrain $extra_args"
        [ -z "${ema:-}" ] || echo "- <mode>-ema$ema runs add gputrain --ema $ema (the moving average's decay, 0: none; gputrain's default is 0.999 with a constant rate)"
        echo "- PyTorch reference: $torch_note"
        if [ "$parallel" -eq 1 ] && [ "$backend" = gpu ]; then
            echo "- --parallel: runs of W GPUs ran $ngpus/W at a time on disjoint GPUs of this host, sharing its CPUs"
            echo "  and memory (the PyTorch reference ran alone)"
        fi
        echo
        echo "time to ${target:-0.87} (first: what a user waits for) is the mean wall time of training to the first"
        echo "evaluation at or above ${target:-0.87}, over the seeds that got there (how many in brackets; $evals_per_epoch evaluations"
        echo "an epoch); accuracy is the final test accuracy, mean (min-max); samples/s is the median epoch"
        echo "throughput after the first epoch (steady_samples_per_s), mean over seeds +- half the range;"
        echo "bad runs counts the runs that diverged (a non-finite loss, or stopped by the guard) or stalled"
        echo "(final test accuracy below 0.15, chance is 0.10)."
        if [ -n "$train_samples" ] && [ "$torch_note" = "${torch_note#not run}" ]; then
            echo
            echo "The PyTorch runs train on the whole training set (the reference has no --train-samples)."
        fi
        # Rows in matrix order: model, then mode as listed above, then worker count.
        awk -F, -v models="${model_list[*]}" -v labels="${run_labels[*]} pytorch" -v workers="${worker_list[*]}" \
            -v target="${target:-0.87}" -v tag="$(awk -v t="${target:-0.87}" 'BEGIN { printf "%03d", t * 100 + 0.5 }')" '
            NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
            { key[++n] = $(c["model"]) SUBSEP $(c["label"]) SUBSEP $(c["workers"]); row[key[n]] = $0 }
            END {
                nm = split(models, M, " "); nl = split(labels, L, " "); nw = split(workers, W, " ")
                for (i = 1; i <= nm; i++) for (j = 1; j <= nl; j++) for (k = 1; k <= nw; k++)
                    if ((M[i], L[j], W[k]) in row) { $0 = row[M[i], L[j], W[k]]; done[M[i], L[j], W[k]] = 1; print_row() }
                for (i = 1; i <= n; i++) if (!(key[i] in done)) { $0 = row[key[i]]; print_row() }
            }
            function v(name) { return $(c[name]) }
            function f(x, fmt) { return x == "" ? "-" : sprintf(fmt, x) }
            function print_row(    sps, acc, t87, runs, bad) {
                if (v("model") != last) {
                    printf "\n## %s\n\n| mode | workers | runs | time to %s (s) | final test acc | samples/s | bad runs | stale mean | lock wait | barrier wait |\n", v("model"), target
                    print "|---|---:|---:|---:|---|---:|---|---:|---:|---:|"
                    last = v("model")
                }
                sps = v("steady_samples_per_s_mean") == "" ? "-" : sprintf("%.0f +- %.0f", v("steady_samples_per_s_mean"), (v("steady_samples_per_s_max") - v("steady_samples_per_s_min")) / 2)
                acc = v("final_acc_mean") == "" ? "-" : sprintf("%.4f (%.4f-%.4f)", v("final_acc_mean"), v("final_acc_min"), v("final_acc_max"))
                t87 = sprintf("%s (%d/%d)", f(v("time_to_" tag "_mean"), "%.2f"), v("reached_" tag), v("runs"))
                runs = v("runs") (v("runs_not_ok") > 0 ? " (" v("runs_not_ok") " not ok)" : "")
                bad = (v("runs_diverged") > 0 ? v("runs_diverged") " diverged " : "") (v("runs_stalled") > 0 ? v("runs_stalled") " stalled" : "")
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v("label"), v("workers"), runs, t87, acc, sps, bad == "" ? "-" : "**" bad "**",
                    f(v("stale_mean_mean"), "%.2f"), f(v("lock_wait_share_mean") == "" ? "" : 100 * v("lock_wait_share_mean"), "%.2f%%"),
                    f(v("barrier_wait_share_mean") == "" ? "" : 100 * v("barrier_wait_share_mean"), "%.2f%%")
            }' "$out/aggregate.csv"
        echo
        echo "## Runs that did not finish cleanly, diverged or stalled"
        echo
        awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
            $(c["status"]) != "ok" || $(c["flag"]) != "" {
                printf "- %s: %s%s (final test acc %s)\n", $(c["run"]), $(c["status"]), $(c["flag"]) == "" ? "" : ", " $(c["flag"]), $(c["final_test_acc"]); n++ }
            END { if (!n) print "none" }' "$out/runs.csv"
        echo
        echo "## Files"
        echo
        echo "- runs/: one JSONL log per run (\`<model>__<mode>__w<workers>__s<seed>.jsonl\`), its command (.cmd), output and exit status"
        echo "- evals.csv (every evaluation), runs.csv (one row per run), aggregate.csv (over seeds), curves/, throughput/"
        for png in "$out"/*.png; do [ -f "$png" ] && echo "- $(basename "$png")"; done
    } >"$out/README.md"
    note "wrote $out/README.md"
}

# The settings the README names, saved beside the runs so that --replot can write it again (a
# matrix cut short by a time limit is then finished by --replot, not rerun).
bench_save_env() {
    declare -p card card_tag backend date_utc command_line data epoch_samples epochs batch lr momentum \
        evals_per_epoch seed_list torch_note parallel ngpus train_samples model_list run_labels \
        worker_list host_cores commit ema extra_args target >"$out/bench.env"
}

if [ "$replot" -eq 1 ]; then
    [ -n "$out" ] && [ -d "$out/runs" ] || usage_error "--replot needs --out DIR with the runs/ of an earlier benchmark"
    gt_need_matplotlib
    bench_charts "$out"
    if [ -f "$out/bench.env" ]; then
        # shellcheck disable=SC1091
        . "$out/bench.env"
        bench_readme
    fi
    exit 0
fi

read -r -a model_list <<<"$models"
[ -z "$seeds" ] || { read -r -a seed_list <<<"$seeds"; check_list --seeds "${seed_list[@]}"; }
[ ${#model_list[@]} -gt 0 ] || usage_error "--model: empty list"
for m in "${model_list[@]}"; do
    case "$m" in lenet5 | cnn-wide | lenet5-classic | mlp) ;; *) usage_error "--model: unknown model '$m' (lenet5, cnn-wide, lenet5-classic, mlp)" ;; esac
done
if [ "$quick" -eq 1 ]; then
    [ -n "$seeds" ] || seed_list=(1)
    epochs=${epochs:-1}
    train_samples=${train_samples:-3000}
fi

# ---- the host: binaries, data, devices -----------------------------------------------------------
gt_resolve_inputs

# The epoch size comes from the label file's IDX header (bytes 4..7, big-endian count).
# gzip stops early on purpose (head closes the pipe), so its status is not looked at.
data_count=$(set +o pipefail; gzip -dc "$data/train-labels-idx1-ubyte.gz" 2>/dev/null | head -c 8 | od -An -tu1 |
    awk 'NF == 8 && $3 == 8 && $4 == 1 { print ($5 * 16777216) + ($6 * 65536) + ($7 * 256) + $8 }')
case "$data_count" in '' | 0 | *[!0-9]*) usage_error "--data: '$data/train-labels-idx1-ubyte.gz' is not an IDX label file" ;; esac
epoch_samples=$data_count
if [ -n "$train_samples" ] && [ "$train_samples" -lt "$data_count" ]; then epoch_samples=$train_samples; fi

ngpus=0
if [ "$force_cpu" -eq 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
    ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ -n "$gpus_max" ] && [ "$ngpus" -gt "$gpus_max" ]; then ngpus=$gpus_max; fi
linked() { command -v ldd >/dev/null 2>&1 && ldd "$bin" 2>/dev/null | grep -q "$1"; }
if [ "$ngpus" -gt 0 ]; then
    linked libcudart || die "GPUs are present but '$bin' is not linked with CUDA (rebuild, or pass --cpu)"
    backend=gpu
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -n 1)
    card_tag=$(printf '%s' "$card" | tr ' ' '-' | tr -cd 'A-Za-z0-9._+-')
    have_nccl=0
    if linked libnccl; then have_nccl=1; fi
    epochs=${epochs:-10}
    [ -n "${seed_list+x}" ] || seed_list=(1 2 3 4 5 6 7 8 9 10)
else
    backend=cpu
    card=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
    card=${card:-unknown CPU}
    short=$(printf '%s' "$card" | sed -e 's/([^)]*)//g' -e 's/@.*//' -e 's/\bCPU\b//g' -e 's/\bProcessor\b//g' \
        -e 's/[0-9]*-Core//g' -e 's/  */ /g' -e 's/^ //' -e 's/ $//')
    card_tag=cpu-$(printf '%s' "$short" | tr ' ' '-' | tr -cd 'A-Za-z0-9._+-')
    have_nccl=0
    epochs=${epochs:-3}
    [ -n "${seed_list+x}" ] || seed_list=(1 2 3)
fi

if [ -z "$workers" ]; then
    if [ "$backend" = gpu ]; then
        workers=""
        for w in 1 2 4; do [ "$w" -le "$ngpus" ] && workers="$workers $w"; done
    else
        workers="1 2"
    fi
fi
read -r -a worker_list <<<"$workers"
check_list --workers "${worker_list[@]}"
for w in "${worker_list[@]}"; do
    if [ "$backend" = gpu ] && [ "$w" -gt "$ngpus" ]; then usage_error "--workers: $w workers but only $ngpus GPUs"; fi
done

mode_list=()
for m in ${modes:-$all_modes}; do
    case " $all_modes $extra_modes " in *" $m "*) ;; *) usage_error "--modes: unknown mode '$m' (one of: $all_modes $extra_modes)" ;; esac
    if [ "$m" = allreduce ] && [ "$have_nccl" -eq 0 ]; then
        [ -z "$modes" ] || note "skipping allreduce: it needs GPUs and a gputrain linked with NCCL"
        continue
    fi
    mode_list+=("$m")
done
[ ${#mode_list[@]} -gt 0 ] || usage_error "--modes: nothing left to run"

# The literal recipe needs a gputrain that has --literal.
has_literal=0
if "$bin" --help 2>/dev/null | grep -q -- '--literal'; then has_literal=1; fi
if [ "$literal" = 1 ] && [ "$has_literal" -eq 0 ]; then
    usage_error "--literal: '$bin' has no --literal flag (its --help does not list it); use --no-literal"
fi
[ "$literal" != auto ] || literal=$has_literal
run_labels=("${mode_list[@]}")
if [ "$literal" -eq 1 ]; then
    for m in "${mode_list[@]}"; do run_labels+=("$m-literal"); done
fi
if [ -n "$ema" ]; then
    for m in "${mode_list[@]}"; do run_labels+=("$m-ema$ema"); done
fi

date_utc=$(date -u +%F)
out=${out:-$root/results/bench-$card_tag-$date_utc}
logs=$out/runs
[ "$dry_run" -eq 1 ] || mkdir -p "$logs" || die "--out: cannot create '$logs'"

# Echoes the gputrain flags of a run label (a mode, or a mode with -literal or -emaDECAY), one per line.
# Only what the user gave is passed, so the default recipe is what a user gets.
mode_flags() {
    local m=${1%-literal}
    [ "$m" = "$1" ] || echo --literal
    case "$m" in *-ema*) printf '%s\n' --ema "${m##*-ema}"; m=${m%-ema*} ;; esac
    [ -z "$lr" ] || printf '%s\n' --lr "$lr"
    [ "$batch_given" -eq 0 ] || printf '%s\n' --batch "$batch"
    case "$m" in hogwild-m0.5) ;; *) [ -z "$momentum" ] || printf '%s\n' --momentum "$momentum" ;; esac
    case "$m" in
        hogwild) printf '%s\n' --mode hogwild ;;
        hogwild-m0.5) printf '%s\n' --mode hogwild --momentum 0.5 ;;
        hogwild-lockfree) printf '%s\n' --mode hogwild --stripes 0 ;;
        hogwild-overlap) printf '%s\n' --mode hogwild --overlap ;;
        sync) printf '%s\n' --mode sync ;;
        ssp-s*) printf '%s\n' --mode ssp --staleness "${m#ssp-s}" ;;
        local-k4) printf '%s\n' --mode local --sync-every 4 ;;
        allreduce) printf '%s\n' --mode allreduce ;;
    esac
}

# device_list W SLOT: the devices of a run of W workers in job slot SLOT (--parallel packs the
# slots onto disjoint GPUs: slot k of W-GPU runs holds GPUs k*W .. k*W+W-1).
device_list() {
    if [ "$backend" = cpu ]; then
        echo "cpu:$1"
    else
        seq -s, $(($2 * $1)) $(($2 * $1 + $1 - 1))
    fi
}

run_done() { [ -f "$1.jsonl" ] && grep -q '"type":"summary"' "$1.jsonl" && [ "$(cat "$1.rc" 2>/dev/null)" = 0 ]; }

commit=${GT_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
if [ -z "${GT_COMMIT:-}" ] && [ "$commit" != unknown ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi

host_cores=$(nproc)
torch_note="not run (the benchmark was cut short before it)"
[ "$no_torch" -eq 0 ] || torch_note="not run (--no-torch)"
[ "$dry_run" -eq 1 ] || bench_save_env

# ---- the matrix -----------------------------------------------------------------------------------
total=$((${#model_list[@]} * ${#run_labels[@]} * ${#worker_list[@]} * ${#seed_list[@]}))
note "$card ($backend), $total runs: models ${model_list[*]}; modes ${run_labels[*]}; workers ${worker_list[*]}; seeds ${seed_list[*]}; $epochs epochs of $epoch_samples samples, batch $batch"
note "output: $out"
# run_one I ID W SLOT CMD...: runs one matrix entry with its logs under $logs/ID and prints one
# line (in the background under --parallel, so each line is printed whole).
run_one() {
    local i=$1 id=$2 base=$logs/$2 rc=0 line
    shift 4
    printf '%q ' "$@" >"$base.cmd"
    echo >>"$base.cmd"
    rm -f "$base.jsonl" "$base.rc"
    "$@" >"$base.out" 2>"$base.err" || rc=$?
    echo "$rc" >"$base.rc"
    : >>"$base.jsonl" # a run that failed before its first line is still listed
    if [ "$rc" -ne 0 ]; then
        line="FAILED (exit $rc): $(tail -n 1 "$base.err")"
    else
        line=$(awk -F'[:,}]' '/"type":"summary"/ {
            for (k = 1; k < NF; k++) {
                if ($k == "\"test_acc\"") acc = $(k + 1)
                if ($k == "\"samples_per_s\"") sps = $(k + 1)
                if ($k == "\"wall_s\"") wall = $(k + 1)
            }
            printf "test acc %s, %s samples/s, %s s\n", acc, sps, wall
        }' "$base.jsonl")
    fi
    printf 'bench: [%d/%d] %s ... %s\n' "$i" "$total" "$id" "$line"
}

# Job slots for --parallel: slot_pid[k] is the run holding slot k, if any.
slot_pid=()
# take_slot SLOTS: waits until one of SLOTS slots is free and sets $slot to it.
take_slot() {
    local k
    while :; do
        for ((k = 0; k < $1; k++)); do
            if [ -z "${slot_pid[k]:-}" ] || ! kill -0 "${slot_pid[k]}" 2>/dev/null; then
                [ -z "${slot_pid[k]:-}" ] || wait "${slot_pid[k]}" || true
                slot_pid[k]=""
                slot=$k
                return
            fi
        done
        wait -n 2>/dev/null || true
    done
}

i=0
for model in "${model_list[@]}"; do
    for w in "${worker_list[@]}"; do
        every=$((epoch_samples / (batch * w * evals_per_epoch)))
        [ "$every" -ge 1 ] || every=1
        slots=1
        if [ "$parallel" -eq 1 ] && [ "$backend" = gpu ]; then slots=$((ngpus / w)); fi
        for label in "${run_labels[@]}"; do
            mapfile -t flags < <(mode_flags "$label")
            # --eval-every counts the run's steps: a clock of every worker's batch, but in hogwild
            # one worker's batch, so hogwild's evaluations fall at the same samples at every w
            run_every=$every
            case "$label" in hogwild*) run_every=$((every * w)) ;; esac
            for seed in "${seed_list[@]}"; do
                i=$((i + 1))
                id=${model}__${label}__w${w}__s${seed}
                base=$logs/$id
                slot=0
                if [ "$dry_run" -eq 0 ] && run_done "$base"; then
                    note "[$i/$total] $id: done before, kept"
                    continue
                fi
                [ "$dry_run" -eq 1 ] || take_slot "$slots"
                cmd=("$bin" --gpus "$(device_list "$w" "$slot")" "${flags[@]}" --model "$model" --epochs "$epochs"
                    --seed "$seed" --eval-every "$run_every"
                    --data "$data" --log "$base.jsonl" --quiet --no-progress)
                [ -z "$train_samples" ] || cmd+=(--train-samples "$train_samples")
                [ -z "$extra_args" ] || cmd+=($extra_args) # word-split on purpose: flags and values
                if [ "$dry_run" -eq 1 ]; then
                    printf '%q ' "${cmd[@]}"
                    echo
                    continue
                fi
                if [ "$slots" -gt 1 ]; then
                    run_one "$i" "$id" "$w" "$slot" "${cmd[@]}" &
                    slot_pid[slot]=$!
                else
                    run_one "$i" "$id" "$w" "$slot" "${cmd[@]}"
                fi
            done
        done
        wait # the next worker count packs its slots afresh
        slot_pid=()
    done
done
failed=$(cat "$logs"/*.rc 2>/dev/null | grep -cv '^0$' || true)
[ "$dry_run" -eq 0 ] || exit 0

# ---- the PyTorch reference, same session, same card -----------------------------------------------
torch_note="not run"
if [ "$no_torch" -eq 1 ]; then
    torch_note="not run (--no-torch)"
elif [ "$backend" != gpu ]; then
    torch_note="not run (no GPUs)"
elif ! python3 -c 'import torch' >/dev/null 2>&1; then
    torch_note="not run (python3 cannot import torch)"
else
    [ -f "$torch_ref" ] || usage_error "--torch-ref: '$torch_ref' not found"
    torch_note="$torch_ref, $(python3 -c 'import torch; print("PyTorch", torch.__version__)')"
    [ -n "$torch_seeds" ] || torch_seeds="${seed_list[*]}"
    read -r -a torch_seed_list <<<"$torch_seeds"
    check_list --torch-seeds "${torch_seed_list[@]}"
    for w in "${worker_list[@]}"; do
        for seed in "${torch_seed_list[@]}"; do
            id=lenet5__pytorch__w${w}__s${seed}
            base=$logs/$id
            if [ -f "$base.jsonl" ] && grep -q '"samples_per_s_steady"' "$base.jsonl" &&
                [ "$(cat "$base.rc" 2>/dev/null)" = 0 ]; then
                note "$id: done before, kept"
                continue
            fi
            tmode=single
            [ "$w" -eq 1 ] || tmode=ddp
            cmd=(python3 "$torch_ref" --data "$data" --mode "$tmode" --gpus "$w" --batch "$batch" --epochs "$epochs"
                --opt sgd --lr "${lr:-0.05}" --momentum "${momentum:-0.9}" --seed "$seed" --out "$base.jsonl")
            rm -f "$base.jsonl" "$base.rc"
            printf '%q ' "${cmd[@]}" >"$base.cmd"
            echo >>"$base.cmd"
            printf 'bench: PyTorch %s, %d GPU(s), seed %s ... ' "$tmode" "$w" "$seed"
            rc=0
            "${cmd[@]}" >"$base.out" 2>"$base.err" || rc=$?
            echo "$rc" >"$base.rc"
            : >>"$base.jsonl"
            if [ "$rc" -ne 0 ]; then
                failed=$((failed + 1))
                echo "FAILED (exit $rc): $(tail -n 1 "$base.err")"
            else
                echo "done"
            fi
        done
    done
fi

# ---- CSV, charts, README --------------------------------------------------------------------------
bench_charts "$out"

bench_save_env
bench_readme
if [ "$failed" -gt 0 ]; then
    note "$failed run(s) failed; see the .err files in $logs"
    exit 1
fi
