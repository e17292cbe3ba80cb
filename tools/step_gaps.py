#!/usr/bin/env python3
"""step_gaps.py - where a run's time goes between one worker's steps, from gputrain --log files
written with --log-steps.

Usage: tools/step_gaps.py [--worker N] [--top K] LOG.jsonl [LOG.jsonl ...]

Each step record carries wall_s, when the worker took the step's result. Per log this prints the
median interval between the worker's consecutive steps and, per kind of interval, what the
intervals took over that median, in all and per epoch: the epoch's end (an interval from one
epoch's step to the next's: its evaluation, checkpoint and the next epoch's start), an evaluation
inside an epoch (an eval record's wall_s falls in the interval), and the rest. Then the K longest
of the rest with their steps, and the median spacing in steps between intervals over three times
the median: a stall that recurs every N steps (a copy taken every N updates, say) shows there.
Logs without wall_s in their step records (gputrain before it logged them) are refused."""
import argparse
import statistics
import sys

from step_phases import records


def load(path, worker):
    steps, evals = [], []
    for rec in records(path):
        t = rec.get("type")
        if t == "step" and rec.get("worker") == worker:
            steps.append(rec)
        elif t == "eval" and "wall_s" in rec:
            evals.append(rec["wall_s"])
    steps.sort(key=lambda r: (r["step"], r["wall_s"]) if "wall_s" in r else (r["step"], 0))
    return steps, sorted(evals)


def report(path, steps, evals, top):
    if len(steps) < 3:
        return f"{len(steps)} step records of the worker (--log-steps writes them)"
    if any("wall_s" not in r for r in steps):
        return "its step records have no wall_s (a gputrain that did not log them)"
    gaps = [(b["wall_s"] - a["wall_s"], a, b) for a, b in zip(steps, steps[1:])]
    med = statistics.median(g for g, _, _ in gaps)
    epochs = max(r["epoch"] for r in steps) - min(r["epoch"] for r in steps) + 1
    kinds = {"epoch end": [], "evaluation": [], "other": []}
    j = 0
    for g, a, b in gaps:
        while j < len(evals) and evals[j] < a["wall_s"]:
            j += 1
        inside = j < len(evals) and evals[j] <= b["wall_s"]
        kind = "epoch end" if b["epoch"] != a["epoch"] else ("evaluation" if inside else "other")
        kinds[kind].append((g, a, b))
    print(f"{path}: {len(steps)} steps, {epochs} epoch(s), median interval {med * 1e3:.3f} ms, "
          f"last step at {steps[-1]['wall_s']:.3f} s")
    print("| intervals | count | over the median, in all | an epoch | longest |")
    print("|---|---:|---:|---:|---:|")
    for k, v in kinds.items():
        extra = sum(g - med for g, _, _ in v)
        longest = max((g for g, _, _ in v), default=0)
        print(f"| {k} | {len(v)} | {extra * 1e3:.1f} ms | {extra / epochs * 1e3:.1f} ms "
              f"| {longest * 1e3:.1f} ms |")
    rest = sorted(kinds["other"], key=lambda x: -x[0])[:top]
    if rest:
        print("longest of the rest: " + ", ".join(
            f"{g * 1e3:.1f} ms after step {a['step']}" for g, a, _ in rest))
    long_steps = [a["step"] for g, a, _ in kinds["other"] if g > 3 * med]
    if len(long_steps) >= 3:
        spacing = statistics.median(y - x for x, y in zip(long_steps, long_steps[1:]))
        print(f"{len(long_steps)} of the rest over 3x the median, {spacing:.0f} steps apart "
              f"(median)")
    return None


def main(argv):
    ap = argparse.ArgumentParser(
        usage="tools/step_gaps.py [--worker N] [--top K] LOG.jsonl [LOG.jsonl ...]",
        description="Where a run's time goes between one worker's steps, from gputrain --log "
                    "files written with --log-steps.")
    ap.add_argument("logs", nargs="+", metavar="LOG.jsonl")
    ap.add_argument("--worker", type=int, default=0, help="the worker whose steps (default 0)")
    ap.add_argument("--top", type=int, default=5, help="longest intervals listed (default 5)")
    args = ap.parse_args(argv[1:])
    if args.worker < 0 or args.top < 0:
        ap.error("--worker and --top take numbers 0 or more")
    for path in args.logs:
        try:
            steps, evals = load(path, args.worker)
        except OSError as e:
            print(f"step_gaps.py: {path}: {e.strerror}", file=sys.stderr)
            return 1
        why = report(path, steps, evals, args.top)
        if why:
            print(f"step_gaps.py: {path}: worker {args.worker}: {why}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
