#!/usr/bin/env python3
"""plot.py - line charts into a PNG (matplotlib): the loss and accuracy of gputrain runs from their
--log files, or CSV columns (for tools/bench.sh and tools/reproduce.sh).

Usage: tools/plot.py [--out FILE.png] [--title T] RUN.jsonl...
       tools/plot.py --out FILE.png [--title T] [--xlabel X] [--ylabel Y] [--logx]
                     [--ymin V] [--ymax V] [--chance C] SERIES...

With RUN.jsonl files (gputrain --log): train and test loss on the left, train and test accuracy on
the right (chance marked), against epochs (samples / training-set size), one pair of lines per run
(and a third, validation, for a run with --val-split); --out defaults to the first log's name with
.png.

Each SERIES is LABEL=FILE.csv:XCOL:YCOL or LABEL=FILE.csv:XCOL:YCOL:YLOCOL:YHICOL (a shaded band,
e.g. min-max over seeds). The CSV has a header row; columns are found by name; rows with an empty X
or Y cell are left out. Every series gets its own colour (any number of series) and marker.

A series that goes bad is drawn and marked, never only listed in the legend:
  - non-finite Y (nan/inf): the line stops at the last finite point ("diverged");
  - with --chance C: a series whose last Y is below 1.5 x C (e.g. accuracy 0.10 for 10 classes)
    ("stalled");
  - a series that ends below --ymin or above --ymax is drawn along the axis edge it left by.
  Such a series is dashed, its end gets a red cross, and a note under the chart and in the legend
  says what happened and where it really ends.
Axis numbers are written with k/M/G (1.2M, 300k). Exit status: 0 written, 1 a missing file, column
or unreadable cell, 2 a command-line error.
"""
import argparse
import csv
import math
import os
import sys

STALL_FACTOR = 1.5
MARKERS = "os^Dv<>pPXh*"


def fail(msg):
    print(f"plot: {msg}", file=sys.stderr)
    sys.exit(1)


def human(v, _pos=None):
    """1200000 -> 1.2M, 300000 -> 300k, 0.85 -> 0.85."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def parse_series(text):
    label, sep, rest = text.partition("=")
    parts = rest.split(":")
    if not sep or not label or len(parts) not in (3, 5) or not all(parts):
        raise argparse.ArgumentTypeError(
            f"bad series '{text}' (LABEL=FILE.csv:XCOL:YCOL or LABEL=FILE.csv:XCOL:YCOL:YLOCOL:YHICOL)")
    return label, parts[0], parts[1:]


def cell(text, path, col, row):
    try:
        return float(text)
    except ValueError:
        fail(f"{path}: row {row}, column '{col}': '{text}' is not a number")


def read_series(path, cols):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    header = rows[0].keys() if rows else []
    for c in cols:
        if c not in header:
            fail(f"{path}: no column '{c}'")
    data = [[] for _ in cols]
    for i, row in enumerate(rows, start=2):
        if row[cols[0]] == "" or row[cols[1]] == "":
            continue
        for k, c in enumerate(cols):
            data[k].append(cell(row[c], path, c, i) if row[c] != "" else math.nan)
    if not data[0]:
        fail(f"{path}: no rows with values in '{cols[0]}' and '{cols[1]}'")
    return data


# After matplotlib's ten "tab10" colours, ten more that stay apart from them on white.
EXTRA_COLOURS = ("#000075", "#9a6324", "#3cb44b", "#f032e6", "#42d4f4", "#800000", "#808000", "#e6194b",
                 "#469990", "#000000")


def colours(n):
    from matplotlib import colormaps
    if n <= 20:
        return ([colormaps["tab10"](i) for i in range(10)] + list(EXTRA_COLOURS))[:n]
    return [colormaps["turbo"](0.03 + 0.94 * i / (n - 1)) for i in range(n)]


def finite_prefix(xs, ys):
    """Points up to the first non-finite Y, and whether one came."""
    for i, y in enumerate(ys):
        if not math.isfinite(y):
            return xs[:i], ys[:i], True
    return xs, ys, False


def clamp(values, lo, hi):
    return [min(max(v, lo), hi) for v in values]


def draw_series(ax, label, data, colour, marker, a, lo_edge, hi_edge):
    """Draws one series; returns the note of a series that went bad ("" if none)."""
    xs, ys = data[0], data[1]
    fx, fy, diverged = finite_prefix(xs, ys)
    last = fy[-1] if fy else math.nan
    stalled = a.chance is not None and bool(fy) and last < STALL_FACTOR * a.chance
    off_axis = bool(fy) and (last < lo_edge or last > hi_edge)
    note = ""
    if diverged:
        note = "diverged (non-finite)"
    elif stalled:
        note = f"stalled: ends at {last:.3g}"
    elif off_axis:
        note = f"ends at {last:.3g}, off the axis"
    if off_axis:  # drawn along the edge it left by, so the series is seen, not only listed
        fy = clamp(fy, lo_edge, hi_edge)
    style = "--" if note else "-"
    if len(data) == 4:
        lo, hi = data[2][: len(fx)], data[3][: len(fx)]
        if off_axis:
            lo, hi = clamp(lo, lo_edge, hi_edge), clamp(hi, lo_edge, hi_edge)
        ok = [math.isfinite(u) and math.isfinite(v) for u, v in zip(lo, hi)]
        ax.fill_between(fx, lo, hi, where=ok, color=colour, alpha=0.07 if note else 0.15, linewidth=0)
    ax.plot(fx, fy, style, color=colour, marker=marker, markersize=4, linewidth=2.2 if note else 1.8,
            label=f"{label}: {note}" if note else label, clip_on=not off_axis)
    if note and fx:
        ax.plot([fx[-1]], [fy[-1]], "X", color="red", markersize=12, markeredgecolor="black", zorder=5, clip_on=False)
    return f"{label}: {note}" if note else ""


def read_log(path):
    """(x in epochs, {column: values}, class count) of a gputrain --log file's eval records."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from jsonl2csv import parse_line
    cols = ("train_loss", "test_loss", "val_loss", "train_acc", "test_acc", "val_acc")
    xs, ys, epoch_n, nclasses, last = [], {c: [] for c in cols}, 0, 10, None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            records = [parse_line(line) for line in f if line.strip()]
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    for rec in (r for r in records if isinstance(r, dict)):
        if rec.get("type") == "config":
            epoch_n, nclasses = rec.get("train_samples") or 0, rec.get("nclasses") or 10
        elif rec.get("type") == "eval" and (rec.get("samples"), rec.get("step")) != last:
            last = (rec.get("samples"), rec.get("step"))  # an epoch end that is also an --eval-every point
            xs.append(rec["samples"] / epoch_n if epoch_n and "samples" in rec else float(rec.get("epoch", 0)))
            for c in cols:
                v = rec.get(c)
                ys[c].append(float(v) if isinstance(v, (int, float)) else math.nan)
    if not xs:
        fail(f"{path}: no evaluation records (a gputrain --log file?)")
    return xs, ys, nclasses


def plot_logs(a, paths):
    """Loss and accuracy of each run in paths, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(os.path.basename(p)[: -len(".jsonl")], *read_log(p)) for p in paths]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), dpi=100)
    colour = colours(3 * len(runs))
    notes = []
    for ax, (what, cols) in zip(axes, (("loss", ("train_loss", "test_loss", "val_loss")),
                                       ("accuracy", ("train_acc", "test_acc", "val_acc")))):
        chance = 1 / max(r[3] for r in runs) if what == "accuracy" else None
        for i, (name, xs, ys, _) in enumerate(runs):
            for j, c in enumerate(cols):
                if all(math.isnan(v) for v in ys[c]):
                    continue  # val_*: a run without --val-split
                label = c.replace("_", " ") if len(runs) == 1 else f"{name} {c.split('_')[0]}"
                note = draw_series(ax, label, [xs, ys[c]], colour[3 * i + j], MARKERS[j], argparse.Namespace(chance=chance),
                                   -math.inf, math.inf)
                notes += [note] if note else []
        if chance:
            ax.axhline(chance, color="grey", linestyle=":", linewidth=1, label=f"chance ({chance:.3g})")
        ax.set_xlabel("epochs (samples / training-set size)")
        ax.set_ylabel(what)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=9)
    fig.suptitle(a.title or ", ".join(r[0] for r in runs))
    if notes:
        fig.text(0.01, 0.01, "Marked with a red cross: " + "; ".join(notes), fontsize=9, color="darkred")
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    out = a.out or paths[0][: -len(".jsonl")] + ".png"
    try:
        fig.savefig(out)
    except OSError as e:
        fail(f"--out: cannot write '{out}': {e.strerror}")
    print(f"plot: {out}", file=sys.stderr)
    return 0


def main():
    p = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="PNG to write (needed with SERIES)")
    p.add_argument("--title", default="")
    p.add_argument("--xlabel", default="")
    p.add_argument("--ylabel", default="")
    p.add_argument("--logx", action="store_true", help="logarithmic X axis")
    p.add_argument("--ymin", type=float)
    p.add_argument("--ymax", type=float)
    p.add_argument("--chance", type=float, help="chance level of Y (e.g. 0.1): series that end below 1.5x it are marked")
    p.add_argument("series", nargs="+", help="RUN.jsonl, or LABEL=FILE.csv:XCOL:YCOL[:YLOCOL:YHICOL]")
    a = p.parse_args()
    logs = [s for s in a.series if s.endswith(".jsonl") and "=" not in s]
    if logs:
        if len(logs) != len(a.series):
            p.error("give either RUN.jsonl files or CSV series, not both")
        return plot_logs(a, logs)
    if not a.out:
        p.error("--out is needed with CSV series")
    try:
        parsed = [parse_series(s) for s in a.series]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if a.ymin is not None and a.ymax is not None and a.ymin >= a.ymax:
        p.error(f"--ymin {a.ymin} is not below --ymax {a.ymax}")
    series = [(label, read_series(path, cols)) for label, path, cols in parsed]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(12, 7.5), dpi=100)
    lo_edge = a.ymin if a.ymin is not None else -math.inf
    hi_edge = a.ymax if a.ymax is not None else math.inf
    notes = []
    for i, ((label, data), colour) in enumerate(zip(series, colours(len(series)))):
        notes.append(draw_series(ax, label, data, colour, MARKERS[i % len(MARKERS)], a, lo_edge, hi_edge))
    notes = [n for n in notes if n]
    below = 0.0
    if notes:  # under the chart, where no data or legend can hide it
        below = 0.035 + 0.024 * len(notes)
        fig.text(0.01, 0.01, "Marked with a red cross (dashed; drawn along the axis edge when off it):\n" +
                 "\n".join(notes), va="bottom", ha="left", fontsize=9, color="darkred")
    if a.logx:
        ax.set_xscale("log")
        xs = sorted({x for _, data in series for x in data[0] if x > 0})
        if len(xs) <= 12:  # few X values (worker counts): a tick at each, none in between
            ax.set_xticks(xs)
            ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(bottom=a.ymin, top=a.ymax)
    ax.xaxis.set_major_formatter(FuncFormatter(human))
    ax.yaxis.set_major_formatter(FuncFormatter(human))
    ax.set_title(a.title)
    ax.set_xlabel(a.xlabel)
    ax.set_ylabel(a.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=9, ncol=2 if len(series) > 8 else 1)
    fig.tight_layout(rect=(0, below, 1, 1))
    try:
        fig.savefig(a.out)
    except OSError as e:
        fail(f"--out: cannot write '{a.out}': {e.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
