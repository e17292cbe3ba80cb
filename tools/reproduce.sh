#!/usr/bin/env bash
# reproduce.sh - the Fashion-MNIST LeNet reference runs, each for several seeds, with per-epoch
# curves, a summary against the reference numbers, CSV files (tools/jsonl2csv.py), PNG charts
# (tools/plot.py) and a README.
#
# Usage: tools/reproduce.sh [options]
#   --gpus LIST        passed to gputrain: 0 | 0,1,2,3 | cpu:N (default: every GPU, else cpu:1)
#   --modes LIST       modes to repeat each run in (default "sync"; with one worker they coincide)
#   --runs LIST        only these runs (names below; default: all)
#   --seeds LIST       seeds (default "1 2 3")
#   --epochs N         override every run's epochs (for tests)
#   --train-samples N  train on the first N samples only (for tests)
#   --quick            tiny runs for testing: 1 seed, 2 epochs, --train-samples 2000
#   --data DIR         Fashion-MNIST folder (default: datasets/fashion-mnist, then
#                      /usr/share/datasets/fashion-mnist)
#   --bin PATH         gputrain binary (default build/gputrain)
#   --out DIR          output folder (default results/reproduce-<card>-<UTC date>); runs already
#                      there are kept, so the 1-GPU and the 4-GPU commands can share one folder
#   --dry-run          print the run commands, run nothing
#   --replot           run nothing: rebuild the CSVs and charts of --out DIR from its runs/
#   --help             this text
#
# The runs (batch is per worker):
#   lenet5-adam-b32    lenet5, Adam lr 1e-3, batch 32, 10 epochs        PyTorch: 0.887
#   lenet5-sgd-b64     lenet5, SGD lr 0.05 momentum 0.9, batch 64, 10   PyTorch: 0.884
#   lenet5-classic     lenet5-classic (D2L), SGD lr 0.9, momentum 0,
#                      batch 256, 10 epochs                              D2L: 0.78-0.83
#   lenet5-cosine      lenet5, SGD lr 0.05 momentum 0.9, cosine, warm-up 1 epoch,
#                      weight decay 5e-4, batch 64, 30 epochs            goal: 0.905
#   cnn-wide-sgd-cos   cnn-wide, SGD lr 0.05 momentum 0.9, cosine, warm-up 1,
#                      weight decay 5e-4, batch 64, 20 epochs            goal: 0.920 (zalando 0.916)
#   cnn-wide-adam-cos  cnn-wide, Adam lr 1e-3, cosine, warm-up 1, batch 64, 20 epochs
#                                                                         goal: 0.920
# Every run evaluates at each epoch end, so the train loss and accuracy of an evaluation line are
# the epoch's averages, as Dive into Deep Learning prints them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/tools/lib.sh"
gt_prog=reproduce
gt_command_line "$0" "$@"

# The reference each run is measured against: kind (min = at least, band = inside), low, high, source.
run_reference() {
    case "$1" in
        lenet5-adam-b32) echo "min 0.887 0.887 PyTorch same settings" ;;
        lenet5-sgd-b64) echo "min 0.884 0.884 PyTorch same settings" ;;
        lenet5-classic) echo "band 0.78 0.83 Dive into Deep Learning LeNet chapter" ;;
        lenet5-cosine) echo "min 0.905 0.905 project goal" ;;
        cnn-wide-*) echo "min 0.920 0.920 project goal (zalando benchmark lists 0.916)" ;;
    esac
}

# reproduce_tables: OUT/{evals,runs,aggregate}.csv (tools/jsonl2csv.py), epochs.csv, epoch_means/ and
# summary.csv from the logs in OUT/runs/ (variables out and logs).
reproduce_tables() {
    gt_jsonl2csv --first-field config "$logs" "$out" || die "tools/jsonl2csv.py failed on $logs"

    # epochs.csv: every run's per-epoch numbers; epoch_means/: mean, min and max over seeds per epoch.
    awk -F, -v OFS=, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k
            print "run,config,mode,workers,seed,epoch,train_loss,train_acc,test_loss,test_acc,wall_s"; next }
        { print $(c["run"]), $(c["config"]), $(c["mode"]), $(c["workers"]), $(c["seed"]), $(c["epoch"]),
            $(c["train_loss"]), $(c["train_acc"]), $(c["test_loss"]), $(c["test_acc"]), $(c["wall_s"]) }' \
        "$out/evals.csv" >"$out/epochs.csv"
    rm -rf "$out/epoch_means"
    mkdir -p "$out/epoch_means"
    awk -F, -v dir="$out/epoch_means" '
        NR == 1 { next }
        {
            g = $2 "__" $3 "__w" $4
            if (!(g in seen)) { seen[g] = 1; groups[++ng] = g }
            key = g SUBSEP $6
            if (!(key in n)) { ep[g, ++ne[g]] = $6 + 0 }
            n[key]++
            for (k = 7; k <= 10; k++) {
                v = $k + 0
                sum[key, k] += v
                if (n[key] == 1 || v < lo[key, k]) lo[key, k] = v
                if (n[key] == 1 || v > hi[key, k]) hi[key, k] = v
            }
        }
        END {
            for (i = 1; i <= ng; i++) {
                g = groups[i]
                f = dir "/" g ".csv"
                print "epoch,train_loss_mean,train_loss_min,train_loss_max,train_acc_mean,train_acc_min,train_acc_max,test_loss_mean,test_acc_mean,test_acc_min,test_acc_max,n" > f
                for (j = 1; j <= ne[g]; j++) {
                    key = g SUBSEP ep[g, j]
                    m = n[key]
                    printf "%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d\n", ep[g, j],
                        sum[key, 7] / m, lo[key, 7], hi[key, 7], sum[key, 8] / m, lo[key, 8], hi[key, 8],
                        sum[key, 9] / m, sum[key, 10] / m, lo[key, 10], hi[key, 10], m > f
                }
                close(f)
            }
        }' "$out/epochs.csv"

    # summary.csv: final test accuracy over seeds next to its reference.
    {
        echo "config,mode,workers,backend,runs,runs_not_ok,epochs,final_acc_mean,final_acc_std,final_acc_min,final_acc_max,reference_kind,reference_low,reference_high,verdict,reference_source"
        awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
            { g = $(c["config"]) "," $(c["mode"]) "," $(c["workers"]) "," $(c["backend"])
              if (!(g in n)) order[++ng] = g
              n[g]++
              if ($(c["status"]) != "ok") bad[g]++
              if ($(c["final_test_acc"]) == "") next
              v = $(c["final_test_acc"]) + 0; m[g]++; s[g] += v; ss[g] += v * v
              if (m[g] == 1 || v < lo[g]) lo[g] = v
              if (m[g] == 1 || v > hi[g]) hi[g] = v }
            END { for (i = 1; i <= ng; i++) { g = order[i]
                  if (!m[g]) { printf "%s,%d,%d,,,,\n", g, n[g], bad[g] + 0; continue }
                  mean = s[g] / m[g]; var = m[g] > 1 ? (ss[g] - m[g] * mean * mean) / (m[g] - 1) : 0
                  printf "%s,%d,%d,%.6g,%.6g,%.6g,%.6g\n", g, n[g], bad[g] + 0, mean, (var > 0 ? sqrt(var) : 0), lo[g], hi[g] } }' \
            "$out/runs.csv" |
            while IFS=, read -r config mode workers backend nruns nbad mean std lo hi; do
                epochs=$(awk -F, -v g="$config,$mode,$workers" '$2 "," $3 "," $4 == g && $6 > e { e = $6 } END { print e + 0 }' "$out/epochs.csv")
                read -r kind rlo rhi source <<<"$(run_reference "$config")"
                verdict=""
                if [ -n "$mean" ] && [ -n "$kind" ]; then
                    verdict=$(awk -v k="$kind" -v m="$mean" -v lo="$rlo" -v hi="$rhi" 'BEGIN {
                        if (k == "min") print (m >= lo ? "met" : sprintf("missed by %.4f", lo - m))
                        else if (m < lo) printf "below the band by %.4f\n", lo - m
                        else if (m > hi) printf "above the band by %.4f\n", m - hi
                        else print "inside the band" }')
                fi
                echo "$config,$mode,$workers,$backend,$nruns,$nbad,$epochs,$mean,$std,$lo,$hi,$kind,$rlo,$rhi,$verdict,${source//,/;}"
            done
    } >"$out/summary.csv"

}

# reproduce_charts: the PNG charts of OUT/epoch_means/ (variables out and card_tag).
reproduce_charts() {
    has_values() {
        awk -F, -v col="$2" 'NR == 1 { for (k = 1; k <= NF; k++) if ($k == col) c = k; next }
            c && $c != "" { found = 1; exit } END { exit !found }' "$1"
    }
    chart() { # out title ylabel column-stem groups...
        local png=$1 title=$2 ylabel=$3 stem=$4 series=() f g
        shift 4
        for g in "$@"; do
            f=$out/epoch_means/$g.csv
            if [ -f "$f" ] && has_values "$f" "${stem}_mean"; then
                series+=("${g//__/ }=$f:epoch:${stem}_mean:${stem}_min:${stem}_max")
            fi
        done
        [ ${#series[@]} -gt 0 ] || return 0
        local chance=()
        [ "$stem" != test_acc ] || chance=(--chance 0.1) # Fashion-MNIST: 10 classes
        gt_plot --out "$out/$png" --title "$title" --xlabel epoch --ylabel "$ylabel" "${chance[@]}" "${series[@]}" ||
            die "tools/plot.py failed"
        note "wrote $out/$png"
    }
    mapfile -t groups < <(for f in "$out"/epoch_means/*.csv; do [ -f "$f" ] && basename "$f" .csv; done)
    if [ ${#groups[@]} -gt 0 ]; then
        chart test_acc.png "Fashion-MNIST: test accuracy per epoch ($card_tag)" "test accuracy (mean, band min-max)" test_acc "${groups[@]}"
        chart train_loss.png "Fashion-MNIST: training loss per epoch ($card_tag)" "train loss (epoch mean)" train_loss "${groups[@]}"
        for g in "${groups[@]}"; do
            case "$g" in lenet5-classic__*) ;; *) continue ;; esac
            f=$out/epoch_means/$g.csv
            rest=${g#lenet5-classic__}
            gt_plot --out "$out/classic_$rest.png" --title "lenet5-classic (D2L LeNet), ${rest//__/ }" --xlabel epoch \
                --ylabel "mean over seeds, band min-max" "train loss=$f:epoch:train_loss_mean:train_loss_min:train_loss_max" \
                "train acc=$f:epoch:train_acc_mean:train_acc_min:train_acc_max" "test acc=$f:epoch:test_acc_mean:test_acc_min:test_acc_max"
            note "wrote $out/classic_$rest.png"
        done
    fi

}

all_runs="lenet5-adam-b32 lenet5-sgd-b64 lenet5-classic lenet5-cosine cnn-wide-sgd-cos cnn-wide-adam-cos"
gpus="" modes="sync" runs="" seeds="1 2 3" seeds_given=0 epochs_override="" train_samples="" quick=0
data="" bin="$root/build/gputrain" out="" dry_run=0 replot=0

while [ $# -gt 0 ]; do
    case "$1" in
        --gpus) need_value "$1" $#; gpus=$2; shift 2 ;;
        --modes) need_value "$1" $#; modes=$2; shift 2 ;;
        --runs) need_value "$1" $#; runs=$2; shift 2 ;;
        --seeds) need_value "$1" $#; seeds=$2; seeds_given=1; shift 2 ;;
        --epochs) need_value "$1" $#; check_uint "$1" "$2"; epochs_override=$2; shift 2 ;;
        --train-samples) need_value "$1" $#; check_uint "$1" "$2"; train_samples=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --data) need_value "$1" $#; data=$2; shift 2 ;;
        --bin) need_value "$1" $#; bin=$2; shift 2 ;;
        --out) need_value "$1" $#; out=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --replot) replot=1; shift ;;
        --help) gt_usage "$0"; exit 0 ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done

read -r -a seed_list <<<"$seeds"
[ ${#seed_list[@]} -gt 0 ] || usage_error "--seeds: empty list"
for s in "${seed_list[@]}"; do check_uint --seeds "$s"; done
read -r -a mode_list <<<"$modes"
[ ${#mode_list[@]} -gt 0 ] || usage_error "--modes: empty list"
for m in "${mode_list[@]}"; do
    case "$m" in hogwild | sync | ssp | local | allreduce) ;; *) usage_error "--modes: unknown mode '$m' (hogwild, sync, ssp, local, allreduce)" ;; esac
done
read -r -a run_list <<<"${runs:-$all_runs}"
[ ${#run_list[@]} -gt 0 ] || usage_error "--runs: empty list"
for r in "${run_list[@]}"; do
    case " $all_runs " in *" $r "*) ;; *) usage_error "--runs: unknown run '$r' (one of: $all_runs)" ;; esac
done
if [ "$quick" -eq 1 ]; then
    [ "$seeds_given" -eq 1 ] || seed_list=(1)
    epochs_override=${epochs_override:-2}
    train_samples=${train_samples:-2000}
fi

if [ "$replot" -eq 1 ]; then
    [ -n "$out" ] && [ -d "$out/runs" ] || usage_error "--replot needs --out DIR with the runs/ of an earlier reproduction"
    gt_need_matplotlib
    logs=$out/runs
    card_tag=$(basename "$out")
    card_tag=${card_tag#reproduce-}
    reproduce_tables
    reproduce_charts
    exit 0
fi
gt_resolve_inputs

# ---- devices and card ------------------------------------------------------------------------------
ngpus=0
if command -v nvidia-smi >/dev/null 2>&1; then ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true); fi
if [ -z "$gpus" ]; then
    if [ "$ngpus" -gt 0 ]; then gpus=$(seq -s, 0 $((ngpus - 1))); else gpus=cpu:1; fi
fi
case "$gpus" in
    cpu:*) nworkers=${gpus#cpu:}; check_uint --gpus "$nworkers"; backend=cpu ;;
    all) [ "$ngpus" -gt 0 ] || die "--gpus all: no GPU found"; nworkers=$ngpus; backend=gpu ;;
    *[!0-9,]* | ,* | *, | *,,*) usage_error "--gpus: bad list '$gpus' (0,1,2 or cpu:N)" ;;
    *) nworkers=$(($(printf '%s' "$gpus" | tr -cd ',' | wc -c) + 1)); backend=gpu ;;
esac
if [ "$backend" = gpu ]; then
    [ "$ngpus" -gt 0 ] || die "--gpus $gpus: no GPU found (nvidia-smi -L lists none); use cpu:N"
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -n 1)
    card_tag=$(printf '%s' "$card" | tr ' ' '-' | tr -cd 'A-Za-z0-9._+-')
else
    card=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
    card=${card:-unknown CPU}
    short=$(printf '%s' "$card" | sed -e 's/([^)]*)//g' -e 's/@.*//' -e 's/\bCPU\b//g' -e 's/\bProcessor\b//g' \
        -e 's/[0-9]*-Core//g' -e 's/  */ /g' -e 's/^ //' -e 's/ $//')
    card_tag=cpu-$(printf '%s' "$short" | tr ' ' '-' | tr -cd 'A-Za-z0-9._+-')
fi
date_utc=$(date -u +%F)
out=${out:-$root/results/reproduce-$card_tag-$date_utc}
logs=$out/runs

# Echoes the model, batch, epochs and optimizer flags of a run, one per line.
run_flags() {
    case "$1" in
        lenet5-adam-b32) printf '%s\n' lenet5 32 10 --optimizer adam --lr 0.001 ;;
        lenet5-sgd-b64) printf '%s\n' lenet5 64 10 --optimizer sgd --lr 0.05 --momentum 0.9 ;;
        lenet5-classic) printf '%s\n' lenet5-classic 256 10 --optimizer sgd --lr 0.9 --momentum 0 ;;
        lenet5-cosine) printf '%s\n' lenet5 64 30 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine \
            --warmup 1 --weight-decay 0.0005 ;;
        cnn-wide-sgd-cos) printf '%s\n' cnn-wide 64 20 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine \
            --warmup 1 --weight-decay 0.0005 ;;
        cnn-wide-adam-cos) printf '%s\n' cnn-wide 64 20 --optimizer adam --lr 0.001 --schedule cosine --warmup 1 ;;
    esac
}


# ---- the runs --------------------------------------------------------------------------------------
total=$((${#run_list[@]} * ${#mode_list[@]} * ${#seed_list[@]}))
note "$card ($backend), --gpus $gpus ($nworkers workers), $total runs: ${run_list[*]}; modes ${mode_list[*]}; seeds ${seed_list[*]}"
if [ "$dry_run" -eq 0 ]; then
    mkdir -p "$logs" || die "--out: cannot create '$logs'"
    note "output: $out"
    printf '%s  %s\n' "$(date -u +%FT%TZ)" "$command_line" >>"$out/commands.txt"
fi

# Prints a finished run's epochs the way Dive into Deep Learning does.
print_epochs() {
    awk -F'[:,]' '/"type":"eval"/ {
        for (k = 1; k < NF; k++) {
            if ($k == "\"epoch\"") e = $(k + 1)
            if ($k == "\"train_loss\"") l = $(k + 1)
            if ($k == "\"train_acc\"") a = $(k + 1)
            if ($k == "\"test_acc\"") t = $(k + 1)
        }
        printf "    epoch %s, loss %.3f, train acc %.3f, test acc %.3f\n", e, l, a, t
    }' "$1"
}

i=0 failed=0
for run in "${run_list[@]}"; do
    mapfile -t spec < <(run_flags "$run")
    model=${spec[0]} batch=${spec[1]} epochs=${epochs_override:-${spec[2]}}
    for mode in "${mode_list[@]}"; do
        for seed in "${seed_list[@]}"; do
            i=$((i + 1))
            id=${run}__${mode}__w${nworkers}__s${seed}
            base=$logs/$id
            cmd=("$bin" --gpus "$gpus" --mode "$mode" --model "$model" --batch "$batch" --epochs "$epochs"
                "${spec[@]:3}" --seed "$seed" --data "$data" --log "$base.jsonl" --quiet --no-progress)
            [ -z "$train_samples" ] || cmd+=(--train-samples "$train_samples")
            if [ "$dry_run" -eq 1 ]; then
                printf '%q ' "${cmd[@]}"
                echo
                continue
            fi
            if [ -f "$base.jsonl" ] && grep -q '"type":"summary"' "$base.jsonl" && [ "$(cat "$base.rc" 2>/dev/null)" = 0 ]; then
                note "[$i/$total] $id: done before, kept"
                continue
            fi
            printf '%q ' "${cmd[@]}" >"$base.cmd"
            echo >>"$base.cmd"
            note "[$i/$total] $id"
            rm -f "$base.jsonl" "$base.rc"
            rc=0
            "${cmd[@]}" >"$base.out" 2>"$base.err" || rc=$?
            echo "$rc" >"$base.rc"
            : >>"$base.jsonl" # a run that failed before its first line is still listed
            print_epochs "$base.jsonl"
            if [ "$rc" -ne 0 ]; then
                failed=$((failed + 1))
                note "$id FAILED (exit $rc): $(tail -n 1 "$base.err")"
            fi
        done
    done
done
[ "$dry_run" -eq 0 ] || exit 0

# ---- CSV and charts ------------------------------------------------------------------------------
reproduce_tables
reproduce_charts

# ---- README ----------------------------------------------------------------------------------------
commit=${GT_COMMIT:-$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
if [ -z "${GT_COMMIT:-}" ] && [ "$commit" != unknown ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi
{
    echo "# Reproducing the Fashion-MNIST LeNet runs, $card_tag, $date_utc"
    echo
    echo "Written by tools/reproduce.sh; every accuracy below comes from the logs in runs/ (runs.csv);"
    echo "the reference column names the source of each reference number."
    echo
    echo "- card: $card ($backend); date (UTC): $date_utc; commit: $commit"
    echo "- data: $data${train_samples:+, first $train_samples training samples}"
    echo "- commands that wrote this folder (UTC time, command):"
    echo
    sed 's/^/        /' "$out/commands.txt"
    echo
    echo "| run | mode | workers | seeds | epochs | final test acc mean +- std (min-max) | reference | verdict |"
    echo "|---|---|---:|---:|---:|---|---|---|"
    awk -F, 'NR > 1 {
        acc = $8 == "" ? "-" : sprintf("%.4f +- %.4f (%.4f-%.4f)", $8, $9, $10, $11)
        ref = $12 == "band" ? sprintf("%s-%s", $13, $14) : $12 == "min" ? sprintf(">= %s", $13) : "-"
        runs = $5 ($6 > 0 ? " (" $6 " not ok)" : "")
        printf "| %s | %s | %s | %s | %s | %s | %s (%s) | %s |\n", $1, $2, $3, runs, $7, acc, ref, $16, $15 == "" ? "-" : $15 }' \
        "$out/summary.csv"
    for f in "$out"/epoch_means/lenet5-classic__*.csv; do
        [ -f "$f" ] || continue
        g=$(basename "$f" .csv)
        echo
        echo "### ${g//__/ }: per epoch, mean over seeds (as Dive into Deep Learning prints it)"
        echo
        echo "| epoch | loss | train acc | test acc |"
        echo "|---:|---:|---:|---:|"
        awk -F, 'NR > 1 { printf "| %d | %.3f | %.3f | %.3f |\n", $1, $2, $5, $9 }' "$f"
    done
    echo
    echo "## Runs that did not finish cleanly"
    echo
    awk -F, 'NR == 1 { for (k = 1; k <= NF; k++) c[$k] = k; next }
        $(c["status"]) != "ok" { printf "- %s: %s\n", $(c["run"]), $(c["status"]); n++ }
        END { if (!n) print "none" }' "$out/runs.csv"
    echo
    echo "## Files"
    echo
    echo "- runs/: one JSONL log per run (\`<run>__<mode>__w<workers>__s<seed>.jsonl\`), its command (.cmd), output and exit status"
    echo "- epochs.csv: per-epoch train loss, train acc, test loss, test acc of every run; epoch_means/: mean, min, max over seeds"
    echo "- summary.csv: final test accuracy over seeds against the references; runs.csv, evals.csv, aggregate.csv"
    for png in "$out"/*.png; do [ -f "$png" ] && echo "- $(basename "$png")"; done
} >"$out/README.md"
note "wrote $out/README.md"
column -s, -t <"$out/summary.csv" 2>/dev/null | cut -c1-160 || cat "$out/summary.csv"
if [ "$failed" -gt 0 ]; then
    note "$failed run(s) failed; see the .err files in $logs"
    exit 1
fi
