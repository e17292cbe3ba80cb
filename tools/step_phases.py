#!/usr/bin/env python3
"""step_phases.py - where a worker's step goes, from gputrain --log files.

Usage: tools/step_phases.py LOG.jsonl [LOG.jsonl ...]

Prints one markdown row per run: model, workers, batch, the step path, samples/s, and per worker
step the mean microseconds of the store's pull (upload included), the device's part (step and
gradient download, waited for), the store's update work (hogwild's push, the clocked modes' stripe
applies, local's own step) and waits (barriers, staleness gates, queued steps), with the store's
lock wait share and staleness. The phases come from each worker record's pull_us, device_us,
push_us and wait_us (docs/internals.md, "Where a step's time goes"); logs of older versions have
them for hogwild only, and no wait_us."""
import argparse
import json
import sys


def records(path):
    """The records of a gputrain --log file, in order; a line that is not JSON (a run cut off
    mid-line) is skipped. tools/step_gaps.py reads logs with it too."""
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue


def load(path):
    cfg, summary, workers = {}, {}, []
    for rec in records(path):
        t = rec.get("type")
        if t == "config":
            cfg = rec
        elif t == "summary":
            summary = rec
        elif t == "worker":
            workers.append(rec)
    return cfg, summary, workers


def mean(ws, key):
    vals = [w[key] for w in ws if key in w]
    return sum(vals) / len(vals) if vals else None


def main(argv):
    ap = argparse.ArgumentParser(
        usage="tools/step_phases.py LOG.jsonl [LOG.jsonl ...]",
        description="Where a worker's step goes, from gputrain --log files.")
    ap.add_argument("logs", nargs="+", metavar="LOG.jsonl")
    args = ap.parse_args(argv[1:])
    print("| log | model | mode | W | batch | step | samples/s | pull us | device us | push us "
          "| wait us | step us | lock wait | stale mean |")
    print("|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.logs:
        try:
            cfg, s, ws = load(path)
        except OSError as e:
            print(f"step_phases.py: {path}: {e.strerror}", file=sys.stderr)
            return 1
        if not s:
            print(f"step_phases.py: {path}: no summary record (the run did not finish)",
                  file=sys.stderr)
            return 1
        pull, dev, push = mean(ws, "pull_us"), mean(ws, "device_us"), mean(ws, "push_us")
        wait = mean(ws, "wait_us")
        fmt = lambda x: "-" if x is None else f"{x:.1f}"
        step = None if pull is None else pull + dev + push + (wait or 0)
        print(f"| {path.rsplit('/', 1)[-1]} | {s.get('model', '?')} | {s.get('mode', '?')} "
              f"| {s.get('workers', '?')} | {s.get('batch', '?')} | {cfg.get('step', '-')} "
              f"| {s.get('samples_per_s', 0):,.0f} | {fmt(pull)} | {fmt(dev)} | {fmt(push)} "
              f"| {fmt(wait)} | {fmt(step)} | {100 * s.get('lock_wait_share', 0):.2f}% "
              f"| {s.get('stale_mean', 0):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
