#!/usr/bin/env python3
"""trace_steps.py - where a training step's GPU time goes, from a timeline that
tools/bench/cupti_trace.c wrote (GT_TRACE_OUT=trace.csv LD_PRELOAD=build/libgt_cupti_trace.so
gputrain ...).

Usage: tools/trace_steps.py [--kernel NAME] [--from F] [--to F] [--api N [--before MS] | --step]
                            TRACE.csv [TRACE.csv ...]

Steps are cut at each run of the loss kernel (a kernel whose name holds NAME, default "xent": one a
training step); over the steps from fraction F to T of the run (default 0.4 to 0.9: warm, and
clear of the end, which the trace may miss), one line per file with the medians of a step's
period, the time some kernel ran (the union over streams), the GPU's idle time (the rest), and each
copy direction's busy time and bytes. A step whose period exceeds the kernels' time by much waits
on the host or on copies; the copies' columns say which.

--api N reads the host's CUDA calls that a trace taken with GT_TRACE_API_US holds and lists, in
time order, those from MS milliseconds (default 100) before the first step's loss kernel up to the
N-th step's, each with its start relative to that kernel, its length and its thread; then the
window's total per call name and the time some kernel ran in it: what the first steps wait on (a
graph's capture and instantiation, a library's first call, an allocation).

--step prints one step whole instead of the summary: the one whose period is the median of the
steps from F to T, every kernel, copy, memset and traced host call that starts in it, with its
stream (s) or thread (t), in time order from its loss kernel: which copy or call the GPU waits on
(the store's uploads after its apply, a graph's launch)."""
import argparse
import bisect
import statistics
import sys


def union(intervals):
    """Total length covered by (start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def load(path, marker):
    kernels, copies, marks, api = [], {1: [], 2: []}, [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            p = line.rstrip("\n").split(",")
            try:
                if p[0] == "K":
                    s, e = int(p[1]), int(p[2])
                    kernels.append((s, e))
                    if marker in ",".join(p[4:]):
                        marks.append(s)
                elif p[0] == "M":
                    kind = int(p[5])
                    if kind in copies:
                        copies[kind].append((int(p[1]), int(p[2]), int(p[4])))
                elif p[0] == "A":
                    api.append((int(p[1]), int(p[2]), int(p[3]), ",".join(p[4:])))
                elif p[0] != "S":
                    raise ValueError
            except (ValueError, IndexError):
                sys.exit(f"trace_steps.py: {path}:{n}: not a cupti_trace row")
    kernels.sort()
    return kernels, copies, sorted(marks), sorted(api)


def clip(items, a, b):
    return [(max(s, a), min(e, b)) + tuple(rest) for s, e, *rest in items if e > a and s < b]


def summary(path, marker, lo, hi):
    kernels, copies, marks, _ = load(path, marker)
    first, last = int(len(marks) * lo), int(len(marks) * hi)
    if last - first < 2:
        return f"{path}: {len(marks)} steps ('{marker}' kernels): too few to summarise"
    starts = [k[0] for k in kernels]
    rows = []
    for i in range(first, last - 1):
        a, b = marks[i], marks[i + 1]
        # kernels that began before a but end inside the step: look a little back
        ks = kernels[max(0, bisect.bisect_left(starts, a) - 256):bisect.bisect_left(starts, b)]
        row = [b - a, union(clip(ks, a, b))]
        for kind in (1, 2):
            c = clip(copies[kind], a, b)
            row += [union([(s, e) for s, e, _ in c]), sum(x for *_, x in c)]
        rows.append(row)
    m = [statistics.median(col) for col in zip(*rows)]
    return (f"{path}: {len(rows)} steps; median period {m[0] / 1e3:.0f} us, kernels {m[1] / 1e3:.0f} "
            f"us, idle {(m[0] - m[1]) / 1e3:.0f} us; host to device {m[2] / 1e3:.0f} us "
            f"{m[3] / 1e6:.1f} MB; device to host {m[4] / 1e3:.0f} us {m[5] / 1e6:.1f} MB")


def first_steps(path, marker, nsteps, before_ms):
    kernels, _, marks, api = load(path, marker)
    if not api:
        return f"{path}: no API rows (trace with GT_TRACE_API_US set)"
    if len(marks) < nsteps:
        return f"{path}: {len(marks)} steps ('{marker}' kernels), fewer than --api {nsteps}"
    t0, a, b = marks[0], marks[0] - int(before_ms * 1e6), marks[nsteps - 1]
    lines = [f"{path}: host CUDA calls from {before_ms:g} ms before step 1's '{marker}' kernel "
             f"(t = 0) to step {nsteps}'s (t = {(b - t0) / 1e6:.1f} ms)",
             "| start (ms) | length (ms) | thread | call |", "|---:|---:|---:|---|"]
    totals = {}
    for s, e, thread, name in api:
        if e > a and s < b:
            lines.append(f"| {(s - t0) / 1e6:.2f} | {(e - s) / 1e6:.3f} | {thread} | {name} |")
            totals[name] = totals.get(name, 0) + min(e, b) - max(s, a)
    busy = union(clip(kernels, a, b))
    lines.append("window totals: " + ", ".join(
        f"{n} {t / 1e6:.1f} ms" for n, t in sorted(totals.items(), key=lambda x: -x[1])[:10]))
    lines.append(f"kernels ran {busy / 1e6:.1f} ms of the window's {(b - a) / 1e6:.1f} ms")
    return "\n".join(lines)


def step_timeline(path, marker, lo, hi):
    """One step whole: of the steps from lo to hi (fractions), the one whose period is the median,
    cut at the loss kernels of the stream that runs most of them (an evaluation's own loss kernels
    on another stream do not cut it); every kernel, copy, memset and traced host call that starts
    in it, in time order, times from its loss kernel."""
    load(path, marker)  # checks every row
    rows, marks = [], {}
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split(",")
            s, e, where = int(p[1]), int(p[2]), p[3]
            if p[0] == "K":
                what = ",".join(p[4:])
                if marker in what:
                    marks.setdefault(where, []).append(s)
                rows.append((s, e, "s" + where, what))
            elif p[0] == "M":
                kind = {"1": "host to device", "2": "device to host", "8": "device to device"}
                rows.append((s, e, "s" + where,
                             f"copy {kind.get(p[5], 'kind ' + p[5])} {int(p[4]) / 1e6:.2f} MB"))
            elif p[0] == "S":
                rows.append((s, e, "s" + where, "memset"))
            else:
                rows.append((s, e, "t" + where, "call " + ",".join(p[4:])))
    if not marks:
        return f"{path}: no '{marker}' kernels"
    m = sorted(max(marks.values(), key=len))
    first, last = int(len(m) * lo), int(len(m) * hi)
    if last - first < 2:
        return f"{path}: {len(m)} steps ('{marker}' kernels): too few for a timeline"
    steps = sorted(range(first, last - 1), key=lambda i: (m[i + 1] - m[i], i))
    i = steps[len(steps) // 2]
    a, b = m[i], m[i + 1]
    lines = [f"{path}: step {i + 1} of {len(m)}, {(b - a) / 1e3:.1f} us from its '{marker}' "
             f"kernel to the next (the median of steps {first + 1}-{last - 1})",
             "| start (us) | end (us) | length (us) | stream / thread | what |",
             "|---:|---:|---:|---|---|"]
    for s, e, where, what in sorted(r for r in rows if a <= r[0] < b):
        lines.append(f"| {(s - a) / 1e3:.1f} | {(e - a) / 1e3:.1f} | {(e - s) / 1e3:.1f} | "
                     f"{where} | {what} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", metavar="TRACE.csv")
    ap.add_argument("--kernel", default="xent", help="the name part of one kernel a step")
    ap.add_argument("--from", dest="lo", type=float, default=0.4, help="first step, a fraction")
    ap.add_argument("--to", dest="hi", type=float, default=0.9, help="last step, a fraction")
    ap.add_argument("--api", type=int, default=0, metavar="N",
                    help="list the host's CUDA calls up to step N's loss kernel")
    ap.add_argument("--before", type=float, default=100, metavar="MS",
                    help="with --api: start the list MS milliseconds before step 1's")
    ap.add_argument("--step", action="store_true",
                    help="print one step whole (the median period's) instead of the summary")
    args = ap.parse_args()
    if args.api < 0 or args.before < 0:
        ap.error(f"--api {args.api} --before {args.before}: need numbers 0 or more")
    if not 0 <= args.lo < args.hi <= 1:
        ap.error(f"--from {args.lo} --to {args.hi}: need 0 <= from < to <= 1")
    for path in args.traces:
        try:
            if args.api:
                print(first_steps(path, args.kernel, args.api, args.before))
            elif args.step:
                print(step_timeline(path, args.kernel, args.lo, args.hi))
            else:
                print(summary(path, args.kernel, args.lo, args.hi))
        except OSError as e:
            sys.exit(f"trace_steps.py: {path}: {e.strerror}")


if __name__ == "__main__":
    main()
