#!/usr/bin/env python3
"""jsonl2csv.py - turns a folder of run logs (gputrain --log JSONL, and the JSON lines of the
PyTorch reference tools/torch_lenet.py) into CSV files for tables and plots.

Usage: tools/jsonl2csv.py [--first-field NAME] [--torch-train-samples N] LOGDIR [OUTDIR]

A log's file name says what the log itself does not: LOGDIR/<model>__<label>__w<workers>__s<seed>.jsonl
(label is the mode as the matrix names it, e.g. hogwild-m0.5 or ssp-s3). Other names are accepted:
the whole name becomes the run id and label; mode, workers, seed and (unless --first-field names
another column) model come from the log's config record. An optional LOGDIR/<run>.rc holds the
run's exit status.

Writes into OUTDIR (default LOGDIR):
  evals.csv      one row per evaluation of every run
  runs.csv       one row per run: summary line, final and best accuracy, time and samples to reach
                 0.85/0.87/0.88/0.90/0.93/0.94/0.95 (empty if never), throughput, epoch time, startup_s (the
                 summary's time from the process's launch to the start of training; empty for logs
                 without it), staleness (stale_p99_capped: true where the p99 is the histogram's
                 last bin, so the true p99 is that or more; empty for logs without it), waits,
                 repeated_evals (evaluation lines that repeat the point before them, left out),
                 flag ("diverged": a non-finite loss or accuracy, or the trainer's guard stopped the
                 run; "stalled": final test accuracy below 1.5x chance) and guard_events (the
                 trainer's "diverged"/"stalled" event records, recovered or not)
  aggregate.csv  one row per (model, label, workers): mean/min/max over seeds, runs_diverged,
                 runs_stalled
  curves/<model>__<label>__w<N>.csv      per evaluation: means over seeds, acc min/max
  throughput/<model>__<label>.csv        per worker count: samples/s mean/min/max
  (an empty part is left out of these names: a log without a model gives curves/<label>__w<N>.csv)
Every number is copied from a log or computed from logged numbers (means, medians, differences).
Throughput: samples_per_s is the summary line's (whole run, setup and the final evaluation
included); train_samples_per_s is samples / wall_s at the last evaluation; steady_samples_per_s is
the median epoch throughput after the first epoch, the measure the PyTorch reference reports. An old
reference log without a sample count gets its epoch size from --torch-train-samples (default 60000).
Exit status: 0 written, 1 unreadable input, 2 command-line error.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

TARGETS = (0.85, 0.87, 0.88, 0.90, 0.93, 0.94, 0.95)
STALL_FACTOR = 1.5  # a final accuracy below 1.5x chance (0.15 for 10 classes) is "stalled"
NAME_RE = re.compile(r"^(.+)__(.+)__w(\d+)__s(\d+)$")
# C's printf writes non-finite numbers as nan/-nan/inf, which JSON does not have.
NONFINITE_RE = re.compile(r'(?<=[:\[,])\s*(-?)(nan|inf(?:inity)?)\b', re.IGNORECASE)


class LoggedFloat(float):
    """A number as the log wrote it: copied values keep their text (0.0340 stays 0.0340)."""

    def __new__(cls, text):
        obj = float.__new__(cls, text)
        obj.text = text
        return obj


def fail(msg):
    print(f"jsonl2csv: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_line(text):
    def fix(m):
        if m.group(2).lower() == "nan":
            return "NaN"
        return "-Infinity" if m.group(1) else "Infinity"
    try:
        return json.loads(NONFINITE_RE.sub(fix, text), parse_float=LoggedFloat)
    except json.JSONDecodeError:
        return None


def fnum(v):
    """Text of a number as the CSVs carry it: empty for none, %.6g otherwise."""
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if isinstance(v, LoggedFloat):
        return v.text
    return f"{v:.6g}"


def tag(t):
    return f"0{round(t * 100):02d}"


def finite(v):
    return isinstance(v, (int, float)) and math.isfinite(v)


class Run:
    def __init__(self, path, model_from_log):
        self.path = path
        self.id = os.path.basename(path)[: -len(".jsonl")]
        self.label, self.model, self.seed, self.workers, self.mode = self.id, "", "", "", ""
        self.model_from_log = model_from_log  # the first field is the model, so the log may name it
        m = NAME_RE.match(self.id)
        if m:
            self.model, self.label, self.workers, self.seed = m.group(1), m.group(2), m.group(3), m.group(4)
        self.backend, self.summary, self.failed, self.torch, self.dup = "", None, 0, False, 0
        self.evals, self.guard_events, self.bad_lines, self.nclasses = [], 0, 0, 10
        self.steady = ""

    def add_eval(self, ev):
        self.evals.append(ev)


def read_torch(run, rec, torch_n):
    run.torch = True
    gpus = int(rec.get("gpus", 1))
    batch = int(rec.get("batch_per_gpu", rec.get("batch", 64)))
    run.mode = "pytorch-" + str(rec.get("mode", ""))
    run.workers = run.workers or str(gpus)
    if run.label == run.id:
        run.label = run.mode
    run.backend = "gpu" if rec.get("device", "cuda") != "cpu" else "cpu"
    n = int(rec.get("train_samples", torch_n))
    steps = (n // gpus) // batch
    t = 0.0
    accs = rec.get("test_acc", [])
    for e, et in enumerate(rec.get("epoch_times", []), start=1):
        t += et
        run.add_eval({"epoch": e, "step": e * steps, "samples": e * steps * batch * gpus, "wall_s": LoggedFloat(f"{t:.4f}"),
                      "train_loss": rec.get("train_loss", [None] * e)[e - 1] if rec.get("train_loss") else None,
                      "test_acc": accs[e - 1] if e <= len(accs) else None, "lr": rec.get("lr")})
    last = run.evals[-1] if run.evals else {}
    run.summary = {"samples": last.get("samples"), "wall_s": last.get("wall_s"),
                   "samples_per_s": last["samples"] / t if t > 0 else None,
                   "test_acc": last.get("test_acc"), "interrupted": 0}
    run.steady = rec.get("samples_per_s_steady", "")


def read_record(run, rec, last_point, torch_n):
    kind = rec.get("type")
    if "epoch_times" in rec:
        read_torch(run, rec, torch_n)
    elif kind == "config":
        run.nclasses = int(rec.get("nclasses", rec.get("classes", 10)) or 10)
        if run.model_from_log:
            run.model = run.model or str(rec.get("model", ""))
        run.seed = run.seed or str(rec.get("seed", ""))
        run.mode = run.mode or str(rec.get("mode", ""))
        run.workers = run.workers or str(rec.get("workers", ""))
    elif kind == "eval":
        # A second line for the same point (an epoch end that is also an --eval-every step) is
        # counted, not used: its later wall time would stretch the epoch.
        point = (rec.get("epoch"), rec.get("step"), rec.get("samples"))
        if run.evals and point == last_point[0]:
            run.dup += 1
            return
        last_point[0] = point
        run.mode = run.mode or str(rec.get("mode", ""))
        run.workers = run.workers or str(rec.get("workers", ""))
        run.add_eval(rec)
    elif kind == "summary":
        run.summary = rec
        run.mode = run.mode or str(rec.get("mode", ""))
        run.workers = run.workers or str(rec.get("workers", ""))
    elif kind == "worker":
        if rec.get("worker") == 0:
            run.backend = "cpu" if str(rec.get("device", "")).startswith("cpu") else "gpu"
        if rec.get("failed"):
            run.failed += 1
    elif kind in ("diverged", "stalled") or (kind == "event" and rec.get("event") in ("diverged", "stalled")):
        run.guard_events += 1


def read_run(path, torch_n, model_from_log):
    run = Run(path, model_from_log)
    last_point = [None]
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for text in f:
                if not text.strip():
                    continue
                rec = parse_line(text)
                if not isinstance(rec, dict):
                    run.bad_lines += 1
                    continue
                read_record(run, rec, last_point, torch_n)
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    rc_path = path[: -len(".jsonl")] + ".rc"
    run.rc = ""
    if os.path.isfile(rc_path):
        with open(rc_path) as f:
            run.rc = f.readline().strip()
    finish_run(run)
    return run


def epoch_stats(run):
    """Median epoch time and throughput after the first epoch, from the last evaluation of each."""
    ends = {}
    for ev in run.evals:
        ends[int(ev.get("epoch", 0))] = (ev.get("wall_s"), ev.get("samples"))
    d, rate, pw, ps = [], [], 0.0, 0
    for e in sorted(ends):
        w, s = ends[e]
        if not finite(w) or not finite(s):
            continue
        d.append(w - pw)
        rate.append((s - ps) / (w - pw) if w > pw else 0.0)
        pw, ps = w, s
    skip = 1 if len(d) > 1 else 0
    run.epoch_s = statistics.median(d[skip:]) if d else None
    if not run.torch:
        run.steady = statistics.median(rate[skip:]) if rate else None


def run_flag(run):
    values = [ev.get(k) for ev in run.evals for k in ("train_loss", "test_loss", "test_acc")]
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        return "diverged"
    if run.guard_events and run.rc not in ("", "0"):
        return "diverged"
    final = run.final
    if finite(final) and final < STALL_FACTOR / run.nclasses:
        return "stalled"
    return ""


def finish_run(run):
    epoch_stats(run)
    s = run.summary or {}
    if run.rc not in ("", "0"):
        run.status = "exit-" + run.rc
    elif run.summary is None:
        run.status = "incomplete"
    elif s.get("interrupted"):
        run.status = "interrupted"
    elif run.failed:
        run.status = "worker-failed"
    else:
        run.status = "ok"
    last = run.evals[-1] if run.evals else {}
    run.final = s.get("test_acc") if run.summary is not None else last.get("test_acc")
    accs = [ev.get("test_acc") for ev in run.evals if finite(ev.get("test_acc"))]
    run.best = max(accs) if accs else None
    w, n = last.get("wall_s"), last.get("samples")
    run.tsps = n / w if finite(w) and finite(n) and w > 0 else None
    run.reach = {}
    for t in TARGETS:
        hit = next((ev for ev in run.evals if finite(ev.get("test_acc")) and ev["test_acc"] >= t), None)
        run.reach[t] = (hit.get("wall_s"), hit.get("samples")) if hit else (None, None)
    run.flag = run_flag(run)


def write_csv(path, header, rows):
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(",".join(header) + "\n")
            for row in rows:
                f.write(",".join("" if v is None else str(v).replace(",", ";") for v in row) + "\n")
    except OSError as e:
        fail(f"cannot write '{path}': {e.strerror}")


def write_evals(out, ff, runs):
    header = ["run", "label", "mode", "workers", ff, "seed", "epoch", "step", "samples", "wall_s", "train_loss",
              "train_acc", "test_loss", "test_acc", "lr"]
    rows = []
    for r in runs:
        for ev in r.evals:
            rows.append([r.id, r.label, r.mode, r.workers, r.model, r.seed] +
                        [fnum(ev.get(k)) for k in ("epoch", "step", "samples", "wall_s", "train_loss", "train_acc",
                                                   "test_loss", "test_acc", "lr")])
    write_csv(os.path.join(out, "evals.csv"), header, rows)


SUMMARY_KEYS = ("startup_s", "stale_max", "stale_mean", "stale_p99", "stale_p99_capped", "lock_wait_share",
                "barrier_wait_share", "clock_spread_max", "skipped_nonfinite")


def write_runs(out, ff, runs):
    header = ["run", "label", "mode", "workers", ff, "seed", "backend", "status", "evals", "samples", "wall_s",
              "samples_per_s", "train_samples_per_s", "steady_samples_per_s", "epoch_s_median", "final_test_acc",
              "best_test_acc", "final_train_loss"]
    for t in TARGETS:
        header += [f"time_to_{tag(t)}", f"samples_to_{tag(t)}"]
    header += list(SUMMARY_KEYS) + ["repeated_evals", "flag", "guard_events"]
    rows = []
    for r in runs:
        s = r.summary or {}
        last = r.evals[-1] if r.evals else {}
        row = [r.id, r.label, r.mode, r.workers, r.model, r.seed, r.backend, r.status, len(r.evals),
               fnum(s.get("samples")), fnum(s.get("wall_s")), fnum(s.get("samples_per_s")), fnum(r.tsps),
               fnum(r.steady), fnum(r.epoch_s), fnum(r.final), fnum(r.best), fnum(last.get("train_loss"))]
        for t in TARGETS:
            row += [fnum(r.reach[t][0]), fnum(r.reach[t][1])]
        row += [fnum(s.get(k)) for k in SUMMARY_KEYS] + [r.dup, r.flag, r.guard_events]
        rows.append(row)
    write_csv(os.path.join(out, "runs.csv"), header, rows)


def stats(values):
    v = [x for x in values if finite(x)]
    if not v:
        return None
    return {"n": len(v), "mean": sum(v) / len(v), "min": float(min(v)), "max": float(max(v))}


def st(values, what):
    s = stats(values)
    if what == "n":
        return s["n"] if s else 0
    return fnum(s[what]) if s else ""


def group_runs(runs):
    groups = {}
    for r in runs:
        groups.setdefault((r.model, r.label, r.workers), []).append(r)
    return groups


def write_aggregate(out, ff, groups):
    header = [ff, "label", "mode", "workers", "backend", "runs", "runs_not_ok", "final_acc_mean", "final_acc_min",
              "final_acc_max", "samples_per_s_mean", "samples_per_s_min", "samples_per_s_max",
              "train_samples_per_s_mean", "steady_samples_per_s_mean", "steady_samples_per_s_min",
              "steady_samples_per_s_max", "epoch_s_median_mean"]
    for t in TARGETS:
        k = tag(t)
        header += [f"reached_{k}", f"time_to_{k}_mean", f"time_to_{k}_min", f"time_to_{k}_max", f"samples_to_{k}_mean"]
    header += ["stale_mean_mean", "lock_wait_share_mean", "barrier_wait_share_mean", "runs_diverged", "runs_stalled"]
    rows = []
    for (model, label, workers), rs in groups.items():
        sm = [(r.summary or {}) for r in rs]
        acc, sps = [r.final for r in rs], [s.get("samples_per_s") for s in sm]
        steady = [r.steady for r in rs]
        row = [model, label, rs[0].mode, workers, rs[0].backend, len(rs), sum(r.status != "ok" for r in rs),
               st(acc, "mean"), st(acc, "min"), st(acc, "max"), st(sps, "mean"), st(sps, "min"), st(sps, "max"),
               st([r.tsps for r in rs], "mean"), st(steady, "mean"), st(steady, "min"), st(steady, "max"),
               st([r.epoch_s for r in rs], "mean")]
        for t in TARGETS:
            times = [r.reach[t][0] for r in rs]
            row += [st(times, "n"), st(times, "mean"), st(times, "min"), st(times, "max"),
                    st([r.reach[t][1] for r in rs], "mean")]
        row += [st([s.get(k) for s in sm], "mean") for k in ("stale_mean", "lock_wait_share", "barrier_wait_share")]
        row += [sum(r.flag == "diverged" for r in rs), sum(r.flag == "stalled" for r in rs)]
        rows.append(row)
    write_csv(os.path.join(out, "aggregate.csv"), header, rows)


def file_name(*parts):
    """model__label__wN.csv from the non-empty parts, each made safe for a file name."""
    return "__".join(re.sub(r"[^A-Za-z0-9._+-]", "_", p) for p in parts if p) + ".csv"


def mean_or_nan(values):
    v = [x for x in values if isinstance(x, (int, float))]
    return sum(v) / len(v) if v else None


def write_curves(out, groups):
    """Seeds are matched by evaluation: the n-th evaluation of an epoch in one seed with the n-th of
    that epoch in the others (neither the step count of an asynchronous run nor the sample count of
    a clocked one is exactly the same from seed to seed). A run that stopped early leaves the later
    points with fewer seeds (column n)."""
    for (model, label, workers), rs in groups.items():
        points = {}
        for r in rs:
            ordinal = {}
            for ev in r.evals:
                e = int(ev.get("epoch", 0))
                ordinal[e] = ordinal.get(e, 0) + 1
                points.setdefault((e, ordinal[e]), []).append(ev)
        rows = []
        for k, key in enumerate(sorted(points), start=1):
            evs = points[key]
            accs = [ev.get("test_acc") for ev in evs if isinstance(ev.get("test_acc"), (int, float))]
            fin = [a for a in accs if math.isfinite(a)]
            rows.append([k, key[0], fnum(mean_or_nan([ev.get("samples") for ev in evs])),
                         fnum(mean_or_nan([ev.get("wall_s") for ev in evs])), fnum(mean_or_nan(accs)),
                         fnum(min(fin) if fin else None), fnum(max(fin) if fin else None), len(evs)])
        name = file_name(model, label, "w" + workers if workers else "")
        write_csv(os.path.join(out, "curves", name), ["k", "epoch", "samples_mean", "wall_s_mean", "test_acc_mean",
                                                      "test_acc_min", "test_acc_max", "n"], rows)


def write_throughput(out, groups):
    by_label = {}
    for (model, label, workers), rs in groups.items():
        by_label.setdefault((model, label), []).append((workers, rs))
    header = ["workers", "samples_per_s_mean", "samples_per_s_min", "samples_per_s_max", "steady_samples_per_s_mean",
              "steady_samples_per_s_min", "steady_samples_per_s_max", "final_acc_mean", "runs"]
    for (model, label), items in by_label.items():
        items.sort(key=lambda it: int(it[0]) if it[0].isdigit() else 0)
        rows = []
        for workers, rs in items:
            sps = [(r.summary or {}).get("samples_per_s") for r in rs]
            steady = [r.steady for r in rs]
            rows.append([workers, st(sps, "mean"), st(sps, "min"), st(sps, "max"), st(steady, "mean"),
                         st(steady, "min"), st(steady, "max"), st([r.final for r in rs], "mean"), len(rs)])
        write_csv(os.path.join(out, "throughput", file_name(model, label)), header, rows)


def main():
    p = argparse.ArgumentParser(prog="jsonl2csv.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--first-field", default="model", help='name of the first part of the file name (default "model")')
    p.add_argument("--torch-train-samples", type=int, default=60000, help="epoch size of old reference logs")
    p.add_argument("logdir")
    p.add_argument("outdir", nargs="?")
    a = p.parse_args()
    if not re.fullmatch(r"[A-Za-z0-9_]+", a.first_field):
        p.error(f"--first-field: bad column name '{a.first_field}'")
    if a.torch_train_samples < 1:
        p.error(f"--torch-train-samples: bad count '{a.torch_train_samples}'")
    if not os.path.isdir(a.logdir):
        p.error(f"'{a.logdir}' is not a folder")
    out = a.outdir or a.logdir
    logs = sorted(os.path.join(a.logdir, f) for f in os.listdir(a.logdir) if f.endswith(".jsonl"))
    if not logs:
        p.error(f"no .jsonl files in '{a.logdir}'")
    for sub in ("curves", "throughput"):
        d = os.path.join(out, sub)
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            fail(f"cannot create '{d}': {e.strerror}")
        for f in os.listdir(d):
            if f.endswith(".csv"):
                os.remove(os.path.join(d, f))
    runs = [read_run(path, a.torch_train_samples, a.first_field == "model") for path in logs]
    groups = group_runs(runs)
    write_evals(out, a.first_field, runs)
    write_runs(out, a.first_field, runs)
    write_aggregate(out, a.first_field, groups)
    write_curves(out, groups)
    write_throughput(out, groups)
    flagged = sum(1 for r in runs if r.flag)
    print(f"jsonl2csv: {len(runs)} runs ({flagged} diverged/stalled) -> {out}/{{evals,runs,aggregate}}.csv, "
          "curves/, throughput/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
