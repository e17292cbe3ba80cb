#!/usr/bin/env bash
# jsonl2csv.sh - turns a folder of run logs (gputrain --log JSONL, and the JSON lines of the PyTorch
# reference) into CSV files for tables and plots. POSIX awk only (mawk is enough): no python, no jq.
#
# Usage: tools/jsonl2csv.sh [--first-field NAME] [--torch-train-samples N] LOGDIR [OUTDIR]
#
# A log's file name says what the log itself does not: LOGDIR/<model>__<label>__w<workers>__s<seed>.jsonl
# (label is the mode as the matrix names it, e.g. hogwild-m0.5 or ssp-s3). Other names are accepted:
# the whole name becomes the run id and label, mode and workers come from the log, model and seed
# stay empty. An optional LOGDIR/<run>.rc holds the run's exit status.
#
# Writes into OUTDIR (default LOGDIR):
#   evals.csv      one row per evaluation of every run
#   runs.csv       one row per run: summary line, final and best accuracy, time and samples to reach
#                  0.85/0.88/0.90 (empty if never), throughput, epoch time, staleness, waits,
#                  and repeated_evals: evaluation lines that repeat the point before them (left out)
#   aggregate.csv  one row per (model, label, workers): mean/min/max over seeds
#   curves/<model>__<label>__w<N>.csv      per evaluation: means over seeds, acc min/max
#   throughput/<model>__<label>.csv        per worker count: samples/s mean/min/max
# Every number is copied from a log or computed from logged numbers (means, medians, differences).
# Throughput columns: samples_per_s is the summary line's (whole run, setup and the final
# evaluation included); train_samples_per_s is samples / wall_s at the last evaluation (training
# only); steady_samples_per_s is the median epoch throughput after the first epoch, the same
# measure as the PyTorch reference's samples_per_s_steady. The reference logs no sample counts:
# its epoch size is computed as its script does, from --torch-train-samples (default 60000, the
# Fashion-MNIST training set it always uses in full).
set -euo pipefail

die() { echo "jsonl2csv: $*" >&2; exit 1; }

first_field=model
torch_n=60000
while [ $# -gt 0 ]; do
    case "$1" in
        --first-field) [ $# -ge 2 ] || die "--first-field needs a value"; first_field=$2; shift 2 ;;
        --torch-train-samples)
            [ $# -ge 2 ] || die "--torch-train-samples needs a value"
            case "$2" in '' | *[!0-9]*) die "--torch-train-samples: bad count '$2'" ;; esac
            torch_n=$2; shift 2 ;;
        --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        --*) die "unknown option '$1' (see --help)" ;;
        *) break ;;
    esac
done
if [ $# -lt 1 ] || [ $# -gt 2 ]; then die "usage: jsonl2csv.sh [--first-field NAME] [--torch-train-samples N] LOGDIR [OUTDIR]"; fi
case "$first_field" in '' | *[!A-Za-z0-9_]*) die "--first-field: bad column name '$first_field'" ;; esac
logdir=$1
outdir=${2:-$1}
[ -d "$logdir" ] || die "'$logdir' is not a folder"
shopt -s nullglob
logs=("$logdir"/*.jsonl)
shopt -u nullglob
[ ${#logs[@]} -gt 0 ] || die "no .jsonl files in '$logdir'"
mkdir -p "$outdir/curves" "$outdir/throughput" || die "cannot create '$outdir'"
rm -f "$outdir"/curves/*.csv "$outdir"/throughput/*.csv

# shellcheck disable=SC2016 # the program is awk, not shell
prog='
function jget(line, key,    i, s, c, v) {
    i = index(line, "\"" key "\":")
    if (i == 0) return ""
    s = substr(line, i + length(key) + 3)
    while (substr(s, 1, 1) == " ") s = substr(s, 2)
    if (substr(s, 1, 1) == "\"") {
        s = substr(s, 2)
        return substr(s, 1, index(s, "\"") - 1)
    }
    v = ""
    while (s != "") {
        c = substr(s, 1, 1)
        if (c == "," || c == "}" || c == " ") break
        v = v c
        s = substr(s, 2)
    }
    return v
}
function jarr(line, key, out,    i, s) {
    i = index(line, "\"" key "\":")
    if (i == 0) return 0
    s = substr(line, i + length(key) + 3)
    s = substr(s, index(s, "[") + 1)
    s = substr(s, 1, index(s, "]") - 1)
    gsub(/ /, "", s)
    if (s == "") return 0
    return split(s, out, ",")
}
function median(a, n,    i, j, t, b) {
    if (n == 0) return ""
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
    if (n % 2) return b[(n + 1) / 2]
    return (b[n / 2] + b[n / 2 + 1]) / 2
}
function num(v) { return v == "" ? "" : sprintf("%.6g", v) }
function start_run(path,    name, p, n) {
    nr++
    name = path
    sub(/.*\//, "", name)
    sub(/\.jsonl$/, "", name)
    rid[nr] = name; rpath[nr] = path
    rlabel[nr] = name; rmodel[nr] = ""; rseed[nr] = ""; rworkers[nr] = ""; rmode[nr] = ""
    n = split(name, p, "__")
    if (n == 4 && p[3] ~ /^w[0-9]+$/ && p[4] ~ /^s[0-9]+$/) {
        rmodel[nr] = p[1]; rlabel[nr] = p[2]; rworkers[nr] = substr(p[3], 2); rseed[nr] = substr(p[4], 2)
    }
    rbackend[nr] = ""; rsummary[nr] = 0; rfailed[nr] = 0; ne[nr] = 0; rtorch[nr] = 0; rdup[nr] = 0
}
function add_eval(r, epoch, step, samples, wall, trl, tra, tel, tea, lr,    k) {
    k = ++ne[r]
    ev_epoch[r, k] = epoch; ev_samples[r, k] = samples; ev_wall[r, k] = wall
    ev_acc[r, k] = tea; ev_trl[r, k] = trl
    printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", rid[r], rlabel[r], rmode[r], rworkers[r], \
        rmodel[r], rseed[r], epoch, step, samples, wall, trl, tra, tel, tea, lr > evals
}
function torch_line(r, line,    ne_t, et, acc, e, gpus, batch, steps, per, t, mode) {
    rtorch[r] = 1
    mode = jget(line, "mode")
    gpus = jget(line, "gpus") + 0
    batch = jget(line, "batch_per_gpu") + 0
    rmode[r] = "pytorch-" mode
    if (rworkers[r] == "") rworkers[r] = gpus
    if (rlabel[r] == rid[r]) rlabel[r] = rmode[r]
    rbackend[r] = "gpu"
    per = int(torch_n / gpus)
    steps = int(per / batch)
    ne_t = jarr(line, "epoch_times", et)
    jarr(line, "test_acc", acc)
    t = 0
    for (e = 1; e <= ne_t; e++) {
        t += et[e]
        add_eval(r, e, e * steps, e * steps * batch * gpus, sprintf("%.4f", t), "", "", "", acc[e], jget(line, "lr"))
    }
    rsummary[r] = 1
    s_samples[r] = ne_t * steps * batch * gpus
    s_wall[r] = t
    s_sps[r] = t > 0 ? s_samples[r] / t : ""
    s_steady[r] = jget(line, "samples_per_s_steady")
    s_acc[r] = ne_t ? acc[ne_t] : ""
    s_stale_max[r] = s_stale_mean[r] = s_stale_p99[r] = s_lock[r] = s_barrier[r] = s_spread[r] = s_skip[r] = ""
    s_intr[r] = 0
}
BEGIN {
    evals = outdir "/evals.csv"
    printf "run,label,mode,workers,%s,seed,epoch,step,samples,wall_s,train_loss,train_acc,test_loss,test_acc,lr\n", ff > evals
    ntarget = split("0.85 0.88 0.90", target, " ")
}
FNR == 1 { start_run(FILENAME) }
/"framework":/ { torch_line(nr, $0); next }
/"type":"eval"/ {
    # A second line for the same point (seen at an epoch end that is also an --eval-every step)
    # is counted, not used: its later wall time would stretch the epoch.
    point = jget($0, "epoch") "/" jget($0, "step") "/" jget($0, "samples")
    if (ne[nr] && point == last_point[nr]) { rdup[nr]++; next }
    last_point[nr] = point
    if (rmode[nr] == "") rmode[nr] = jget($0, "mode")
    if (rworkers[nr] == "") rworkers[nr] = jget($0, "workers")
    add_eval(nr, jget($0, "epoch"), jget($0, "step"), jget($0, "samples"), jget($0, "wall_s"), jget($0, "train_loss"),
             jget($0, "train_acc"), jget($0, "test_loss"), jget($0, "test_acc"), jget($0, "lr"))
    next
}
/"type":"summary"/ {
    rsummary[nr] = 1
    if (rmode[nr] == "") rmode[nr] = jget($0, "mode")
    if (rworkers[nr] == "") rworkers[nr] = jget($0, "workers")
    s_samples[nr] = jget($0, "samples"); s_wall[nr] = jget($0, "wall_s"); s_sps[nr] = jget($0, "samples_per_s")
    s_stale_max[nr] = jget($0, "stale_max"); s_stale_mean[nr] = jget($0, "stale_mean"); s_stale_p99[nr] = jget($0, "stale_p99")
    s_lock[nr] = jget($0, "lock_wait_share"); s_barrier[nr] = jget($0, "barrier_wait_share")
    s_spread[nr] = jget($0, "clock_spread_max"); s_skip[nr] = jget($0, "skipped_nonfinite")
    s_acc[nr] = jget($0, "test_acc"); s_intr[nr] = jget($0, "interrupted"); s_steady[nr] = ""
    next
}
/"type":"worker"/ {
    if (jget($0, "worker") == "0") rbackend[nr] = (jget($0, "device") ~ /^cpu/) ? "cpu" : "gpu"
    if (jget($0, "failed") + 0 != 0) rfailed[nr]++
    next
}
function exit_status(r,    f, line) {
    f = rpath[r]
    sub(/\.jsonl$/, ".rc", f)
    line = ""
    if ((getline line < f) > 0) { close(f); return line }
    return ""
}
# Epoch ends are the last evaluation of each epoch; epoch throughput is the samples between two ends
# over the time between them.
function epoch_stats(r,    k, e, ep, last_e, endw, ends, nd, d, rate, pw, ps, i, n2, dd, rr) {
    last_e = 0
    for (k = 1; k <= ne[r]; k++) {
        e = ev_epoch[r, k] + 0
        endw[e] = ev_wall[r, k]; ends[e] = ev_samples[r, k]
        if (e > last_e) last_e = e
    }
    nd = 0; pw = 0; ps = 0
    for (e = 1; e <= last_e; e++) {
        if (!(e in endw)) continue
        nd++
        d[nd] = endw[e] - pw
        rate[nd] = d[nd] > 0 ? (ends[e] - ps) / d[nd] : 0
        pw = endw[e]; ps = ends[e]
    }
    n2 = 0
    for (i = (nd > 1 ? 2 : 1); i <= nd; i++) { n2++; dd[n2] = d[i]; rr[n2] = rate[i] }
    r_epoch_s[r] = num(median(dd, n2))
    if (!rtorch[r]) s_steady[r] = num(median(rr, n2))
}
function run_status(r,    rc) {
    rc = exit_status(r)
    if (rc != "" && rc != "0") return "exit-" rc
    if (!rsummary[r]) return "incomplete"
    if (s_intr[r] + 0 != 0) return "interrupted"
    if (rfailed[r]) return "worker-failed"
    return "ok"
}
function write_runs(    r, k, t, best, hdr, last) {
    runs = outdir "/runs.csv"
    hdr = "run,label,mode,workers," ff ",seed,backend,status,evals,samples,wall_s,samples_per_s,train_samples_per_s," \
          "steady_samples_per_s,epoch_s_median,final_test_acc,best_test_acc,final_train_loss"
    for (t = 1; t <= ntarget; t++) hdr = hdr ",time_to_" tag(target[t]) ",samples_to_" tag(target[t])
    hdr = hdr ",stale_max,stale_mean,stale_p99,lock_wait_share,barrier_wait_share,clock_spread_max,skipped_nonfinite,repeated_evals"
    print hdr > runs
    for (r = 1; r <= nr; r++) {
        epoch_stats(r)
        rstatus[r] = run_status(r)
        best = ""
        for (k = 1; k <= ne[r]; k++) if (best == "" || ev_acc[r, k] + 0 > best + 0) best = ev_acc[r, k]
        last = ne[r]
        if (!rsummary[r]) s_acc[r] = last ? ev_acc[r, last] : ""
        r_tsps[r] = (last && ev_wall[r, last] > 0) ? num(ev_samples[r, last] / ev_wall[r, last]) : ""
        r_final[r] = s_acc[r]
        printf "%s,%s,%s,%s,%s,%s,%s,%s,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s", rid[r], rlabel[r], rmode[r], rworkers[r], rmodel[r],
            rseed[r], rbackend[r], rstatus[r], ne[r], s_samples[r], s_wall[r], num(s_sps[r]), r_tsps[r], s_steady[r],
            r_epoch_s[r], s_acc[r], best, last ? ev_trl[r, last] : "" > runs
        for (t = 1; t <= ntarget; t++) {
            reach_t[r, t] = ""; reach_s[r, t] = ""
            for (k = 1; k <= ne[r]; k++)
                if (ev_acc[r, k] + 0 >= target[t] + 0) { reach_t[r, t] = ev_wall[r, k]; reach_s[r, t] = ev_samples[r, k]; break }
            printf ",%s,%s", reach_t[r, t], reach_s[r, t] > runs
        }
        printf ",%s,%s,%s,%s,%s,%s,%s,%d\n", s_stale_max[r], s_stale_mean[r], s_stale_p99[r], s_lock[r], s_barrier[r],
            s_spread[r], s_skip[r], rdup[r] > runs
    }
}
function tag(t,    s) { s = t; sub(/^0\./, "0", s); return s }
function stat_add(key, v) {
    if (v == "") return
    v += 0
    if (!((key) in st_n)) { st_n[key] = 0; st_sum[key] = 0; st_min[key] = v; st_max[key] = v }
    st_n[key]++; st_sum[key] += v
    if (v < st_min[key]) st_min[key] = v
    if (v > st_max[key]) st_max[key] = v
}
function st(key, what) {
    if (!((key) in st_n)) return what == "n" ? 0 : ""
    if (what == "n") return st_n[key]
    if (what == "mean") return num(st_sum[key] / st_n[key])
    if (what == "min") return num(st_min[key])
    return num(st_max[key])
}
function write_aggregate(    r, g, t, i, hdr, key, out) {
    ng = 0
    for (r = 1; r <= nr; r++) {
        g = rmodel[r] SUBSEP rlabel[r] SUBSEP rworkers[r]
        if (!(g in gidx)) { gidx[g] = ++ng; gkey[ng] = g; gn[ng] = 0; gbad[ng] = 0; gback[ng] = rbackend[r]; gmode[ng] = rmode[r] }
        i = gidx[g]; grun[i, ++gn[i]] = r
        if (rstatus[r] != "ok") gbad[i]++
        stat_add(i SUBSEP "acc", r_final[r]); stat_add(i SUBSEP "sps", s_sps[r]); stat_add(i SUBSEP "steady", s_steady[r])
        stat_add(i SUBSEP "tsps", r_tsps[r]); stat_add(i SUBSEP "epoch", r_epoch_s[r])
        stat_add(i SUBSEP "stale", s_stale_mean[r]); stat_add(i SUBSEP "lock", s_lock[r]); stat_add(i SUBSEP "barrier", s_barrier[r])
        for (t = 1; t <= ntarget; t++) { stat_add(i SUBSEP "t" t, reach_t[r, t]); stat_add(i SUBSEP "s" t, reach_s[r, t]) }
    }
    out = outdir "/aggregate.csv"
    hdr = ff ",label,mode,workers,backend,runs,runs_not_ok,final_acc_mean,final_acc_min,final_acc_max," \
          "samples_per_s_mean,samples_per_s_min,samples_per_s_max,train_samples_per_s_mean," \
          "steady_samples_per_s_mean,steady_samples_per_s_min,steady_samples_per_s_max,epoch_s_median_mean"
    for (t = 1; t <= ntarget; t++)
        hdr = hdr ",reached_" tag(target[t]) ",time_to_" tag(target[t]) "_mean,time_to_" tag(target[t]) "_min,time_to_" tag(target[t]) "_max,samples_to_" tag(target[t]) "_mean"
    hdr = hdr ",stale_mean_mean,lock_wait_share_mean,barrier_wait_share_mean"
    print hdr > out
    for (i = 1; i <= ng; i++) {
        split(gkey[i], key, SUBSEP)
        printf "%s,%s,%s,%s,%s,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s", key[1], key[2], gmode[i], key[3], gback[i], gn[i], gbad[i],
            st(i SUBSEP "acc", "mean"), st(i SUBSEP "acc", "min"), st(i SUBSEP "acc", "max"),
            st(i SUBSEP "sps", "mean"), st(i SUBSEP "sps", "min"), st(i SUBSEP "sps", "max"), st(i SUBSEP "tsps", "mean"),
            st(i SUBSEP "steady", "mean"), st(i SUBSEP "steady", "min"), st(i SUBSEP "steady", "max"), st(i SUBSEP "epoch", "mean") > out
        for (t = 1; t <= ntarget; t++)
            printf ",%d,%s,%s,%s,%s", st(i SUBSEP "t" t, "n"), st(i SUBSEP "t" t, "mean"), st(i SUBSEP "t" t, "min"),
                st(i SUBSEP "t" t, "max"), st(i SUBSEP "s" t, "mean") > out
        printf ",%s,%s,%s\n", st(i SUBSEP "stale", "mean"), st(i SUBSEP "lock", "mean"), st(i SUBSEP "barrier", "mean") > out
    }
}
function safe(s) { gsub(/[^A-Za-z0-9._+-]/, "_", s); return s }
# Seeds are matched by evaluation: the n-th evaluation of an epoch in one seed with the n-th of
# that epoch in the others (the schedule is the same; neither the step count of an asynchronous
# run nor the sample count of a clocked one is exactly the same from seed to seed). A run that
# stopped early leaves the later points with fewer seeds (column n).
function write_curves(    i, j, r, k, key, f, np, pe, po, seen, ord, lastep, id, x, e, n, a, q) {
    for (i = 1; i <= ng; i++) {
        split(gkey[i], key, SUBSEP)
        f = outdir "/curves/" safe(key[1]) "__" safe(key[2]) "__w" safe(key[3]) ".csv"
        print "k,epoch,samples_mean,wall_s_mean,test_acc_mean,test_acc_min,test_acc_max,n" > f
        np = 0
        split("", seen)
        split("", cn); split("", csw); split("", css); split("", csa); split("", clo); split("", chi)
        for (j = 1; j <= gn[i]; j++) {
            r = grun[i, j]
            lastep = ""
            for (k = 1; k <= ne[r]; k++) {
                e = ev_epoch[r, k] + 0
                ord = (e "" == lastep) ? ord + 1 : 1
                lastep = e ""
                id = e SUBSEP ord
                if (!(id in seen)) {
                    seen[id] = 1
                    for (x = np; x >= 1 && (pe[x] > e || (pe[x] == e && po[x] > ord)); x--) { pe[x + 1] = pe[x]; po[x + 1] = po[x] }
                    pe[x + 1] = e; po[x + 1] = ord
                    np++
                }
                a = ev_acc[r, k] + 0
                cn[id]++; csw[id] += ev_wall[r, k]; css[id] += ev_samples[r, k]; csa[id] += a
                if (cn[id] == 1 || a < clo[id]) clo[id] = a
                if (cn[id] == 1 || a > chi[id]) chi[id] = a
            }
        }
        for (q = 1; q <= np; q++) {
            id = pe[q] SUBSEP po[q]
            n = cn[id]
            printf "%d,%d,%s,%s,%s,%s,%s,%d\n", q, pe[q], num(css[id] / n), num(csw[id] / n), num(csa[id] / n), num(clo[id]), num(chi[id]), n > f
        }
        close(f)
    }
}
function write_throughput(    i, j, key, f, m, nm, ws, nw, t, x) {
    nm = 0
    for (i = 1; i <= ng; i++) {
        split(gkey[i], key, SUBSEP)
        m = key[1] SUBSEP key[2]
        if (!(m in mi)) { mi[m] = ++nm; mk[nm] = m; mw[nm] = 0 }
        j = mi[m]; mg[j, ++mw[j]] = i
    }
    for (j = 1; j <= nm; j++) {
        split(mk[j], key, SUBSEP)
        f = outdir "/throughput/" safe(key[1]) "__" safe(key[2]) ".csv"
        print "workers,samples_per_s_mean,samples_per_s_min,samples_per_s_max,steady_samples_per_s_mean,steady_samples_per_s_min,steady_samples_per_s_max,final_acc_mean,runs" > f
        nw = mw[j]
        for (i = 1; i <= nw; i++) ws[i] = mg[j, i]
        for (i = 2; i <= nw; i++) {
            t = ws[i]
            for (x = i - 1; x >= 1 && wnum(ws[x]) > wnum(t); x--) ws[x + 1] = ws[x]
            ws[x + 1] = t
        }
        for (i = 1; i <= nw; i++) {
            split(gkey[ws[i]], key, SUBSEP)
            printf "%s,%s,%s,%s,%s,%s,%s,%s,%d\n", key[3], st(ws[i] SUBSEP "sps", "mean"), st(ws[i] SUBSEP "sps", "min"),
                st(ws[i] SUBSEP "sps", "max"), st(ws[i] SUBSEP "steady", "mean"), st(ws[i] SUBSEP "steady", "min"),
                st(ws[i] SUBSEP "steady", "max"), st(ws[i] SUBSEP "acc", "mean"), gn[ws[i]] > f
        }
        close(f)
    }
}
function wnum(g,    key) { split(gkey[g], key, SUBSEP); return key[3] + 0 }
END {
    n = split(empties, empty, "\n")
    for (i = 1; i <= n; i++) if (empty[i] != "") start_run(empty[i])
    write_runs()
    write_aggregate()
    write_curves()
    write_throughput()
    printf "jsonl2csv: %d runs -> %s/{evals,runs,aggregate}.csv, curves/, throughput/\n", nr, outdir > "/dev/stderr"
}
'
# awk never sees an empty file, so those runs (killed before their first line) are named to it.
empties=""
nonempty=()
for f in "${logs[@]}"; do
    if [ -s "$f" ]; then nonempty+=("$f"); else empties+="$f"$'\n'; fi
done
[ ${#nonempty[@]} -gt 0 ] || nonempty=(/dev/null)
awk -v outdir="$outdir" -v ff="$first_field" -v torch_n="$torch_n" -v empties="$empties" "$prog" "${nonempty[@]}"
