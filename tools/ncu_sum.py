#!/usr/bin/env python3
"""Sums an Nsight Compute CSV by kernel name: where a step's GPU time goes.

Usage: ncu_sum.py NCU_CSV [TOP]
NCU_CSV is what `ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base
...` printed, e.g. over build-cuda/step_bench's eager step (layers-eager: one kernel per launch):
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
      --launch-skip 1000 --launch-count 1500 \
      build-cuda/step_bench synthetic:3x32x32:10:5120 resnet18 256 20 layers-eager bf16 > k.csv
Prints the TOP (30) kernels by summed time, with their share and launch count.
"""
import collections
import csv
import re
import sys
if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0)
if (len(sys.argv) not in (2, 3) or sys.argv[1].startswith("-") or
        (len(sys.argv) == 3 and not sys.argv[2].isdigit())):
    print("usage: ncu_sum.py NCU_CSV [TOP] (--help: more)", file=sys.stderr)
    sys.exit(2)
try:
    with open(sys.argv[1]) as f:
        rows = list(csv.DictReader(l for l in f if l.startswith('"')))
except OSError as err:
    sys.exit(f"ncu_sum.py: {sys.argv[1]}: {err.strerror}")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"]
    name = re.sub(r"\(.*", "", name)[:90]
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "")
    if unit in ("nsecond", "ns"): v /= 1000.0
    elif unit in ("msecond", "ms"): v *= 1000.0
    tot[name] += v; cnt[name] += 1
s = sum(tot.values())
if s <= 0:
    sys.exit(f"ncu_sum.py: {sys.argv[1]}: no gpu__time_duration.sum rows")
print(f"{len(rows)} rows, {sum(cnt.values())} kernels, {s:.0f} us in all")
for n, v in sorted(tot.items(), key=lambda t: -t[1])[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]:
    print(f"{v:10.0f} us {100*v/s:5.1f}% {cnt[n]:5d}x  {n}")
