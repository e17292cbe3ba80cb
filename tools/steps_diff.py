#!/usr/bin/env python3
"""steps_diff.py - compares the per-step losses of gputrain runs (--log-steps) bit for bit.

Usage: tools/steps_diff.py [--out FILE.md] A.jsonl B.jsonl [A2.jsonl B2.jsonl ...]

Each pair of logs (for example the same command run by two builds) is compared on its "step"
records, ordered by (epoch, step, worker): the losses as logged (%.9g, enough to tell floats apart).
Prints one line per pair: the step count of each side and "identical", or the first step that
differs with both losses. --out also writes a Markdown table with the two logs' commands (their
"config" records' version, mode, workers and devices).
Exit status: 0 every pair identical, 1 a pair differs or a log has no step records or cannot be
read, 2 command-line error.
"""
import json
import sys


def usage_error(msg):
    print(f"steps_diff: {msg} (see --help)", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    """The log's step records as a sorted list of ((epoch, step, worker), loss text) and its config."""
    steps, config = [], {}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if '"type":"step"' not in line.replace(" ", "") and '"config"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
                if rec.get("type") == "config":
                    config = rec
                elif rec.get("type") == "step":
                    key = (rec.get("epoch", 0), rec["step"], rec.get("worker", 0))
                    steps.append((key, repr(rec["loss"])))
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    if not steps:
        raise ValueError(f"{path}: no step records (was the run logged with --log-steps?)")
    steps.sort()
    return steps, config


def compare(a, b):
    """(identical, text) for two sorted step lists."""
    for (ka, la), (kb, lb) in zip(a, b):
        if ka != kb or la != lb:
            return False, f"first difference: epoch {ka[0]} step {ka[1]} worker {ka[2]} loss {la} vs " \
                          f"epoch {kb[0]} step {kb[1]} worker {kb[2]} loss {lb}"
    if len(a) != len(b):
        return False, f"step counts differ ({len(a)} vs {len(b)})"
    return True, "identical"


def describe(config):
    if not config:
        return "-"
    devices = ", ".join(config.get("devices", []))
    return f"{config.get('version', '?')}, {config.get('mode', '?')} x{config.get('workers', '?')}, {devices}"


def main(argv):
    out = None
    args = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if argv[i] == "--out":
            if i + 1 >= len(argv):
                usage_error("--out needs a file")
            out = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith("-"):
            usage_error(f"unknown option '{argv[i]}'")
        args.append(argv[i])
        i += 1
    if not args or len(args) % 2:
        usage_error("give the logs in pairs: A.jsonl B.jsonl ...")
    rows, ok = [], True
    for a_path, b_path in zip(args[0::2], args[1::2]):
        try:
            a, ca = read_log(a_path)
            b, cb = read_log(b_path)
        except ValueError as e:
            print(f"steps_diff: {e}", file=sys.stderr)
            return 1
        same, text = compare(a, b)
        ok = ok and same
        print(f"{a_path} ({len(a)} steps) vs {b_path} ({len(b)} steps): {text}")
        rows.append((a_path, describe(ca), b_path, describe(cb), len(a), len(b), text))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write("| log A | run A | log B | run B | steps A | steps B | per-step losses |\n")
            f.write("|---|---|---|---|---:|---:|---|\n")
            for r in rows:
                f.write("| " + " | ".join(str(x) for x in r) + " |\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
