#!/usr/bin/env bash
# cli_phases.sh - where a step's time goes, per worker, in every mode the CPU runs (hogwild with
# and without --overlap, sync, ssp, local): the terminal's worker lines give "us a step: pull P
# device D push/apply A wait W (S% of wall)" and the log's worker records pull_us, device_us,
# push_us, wait_us and phases_share. Each figure is a number, none negative, the device's above
# zero (every worker computes), the share of wall at most a little above 1 (the phases do not
# overlap within a worker); the summary record carries the workers' mean, sane too. No timing is
# asserted beyond that.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
RUN=(--data "$DATA" --gpus cpu:2 --no-progress --model mlp --epochs 1 --train-samples 1024 --batch 32)

for m in hogwild overlap sync ssp local; do
    case $m in
    overlap) args=(--mode hogwild --overlap) ;;
    ssp) args=(--mode ssp --staleness 2) ;;
    local) args=(--mode local --sync-every 4) ;;
    *) args=(--mode "$m") ;;
    esac
    expect_exit 0 -- "${RUN[@]}" "${args[@]}" --log "$TMP/$m.jsonl"
    # the terminal: one line a worker, with every phase
    n=$(grep -cE '^  worker [01] .* steps .* samples/s  us a step: pull [0-9.]+ device [0-9.]+ push/apply [0-9.]+ wait [0-9.]+ \([0-9]+% of wall\)$' "$TMP/out")
    [ "$n" = 2 ] || fail "$m: worker lines: $(grep '^  worker' "$TMP/out")"
    # the log: the same figures, sane
    python3 - "$TMP/$m.jsonl" "$m" <<'PY' || fail "$m: records: $(grep -E '"type":"(worker|summary)"' "$TMP/$m.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ws = [x for x in recs if x["type"] == "worker"]
sm = [x for x in recs if x["type"] == "summary"]
bad = []
if len(ws) != 2 or len(sm) != 1:
    bad.append("%d worker records, %d summaries" % (len(ws), len(sm)))
sm[0]["worker"] = "summary"
for w in ws + sm[:1]:
    for k in ("pull_us", "device_us", "push_us", "wait_us", "phases_share"):
        v = w.get(k)
        if not isinstance(v, (int, float)) or v < 0:
            bad.append("worker %s: %s %r" % (w.get("worker"), k, v))
    if not w.get("device_us", 0) > 0:
        bad.append("worker %s: device_us %r" % (w.get("worker"), w.get("device_us")))
    if w.get("phases_share", 0) > 1.05:
        bad.append("worker %s: phases_share %r above the wall" % (w.get("worker"), w.get("phases_share")))
    if w is not sm[0] and w.get("steps", 0) < 1:
        bad.append("worker %s: no steps" % w.get("worker"))
if bad:
    print(sys.argv[2] + ": " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
done
# the store step in parts with its gradient in bf16: the phases say so; where the pushes are whole
# the option says it changes nothing
expect_exit 0 -- "${RUN[@]}" --mode hogwild --store-parts 4 --stripes 8 --store-grad bf16
n=$(grep -cE '^  worker [01] .* us a step: pull [0-9.]+ device [0-9.]+ bf16 download/push/pull [0-9.]+ wait' "$TMP/out")
[ "$n" = 2 ] || fail "bf16 parts: worker lines: $(grep '^  worker' "$TMP/out")"
expect_exit 0 -- "${RUN[@]}" --mode hogwild --store-grad bf16
grep -q "note: --store-grad bf16 changes nothing in this run" "$TMP/err" ||
    fail "whole pushes with --store-grad bf16: no note: $(cat "$TMP/err")"

# the clocked modes meet at barriers, and a worker of sync waits at two every clock
python3 - "$TMP/sync.jsonl" <<'PY' || fail "sync: no worker waited: $(grep '"type":"worker"' "$TMP/sync.jsonl")"
import json, sys
ws = [json.loads(l) for l in open(sys.argv[1]) if '"type":"worker"' in l]
sys.exit(0 if any(w["wait_us"] > 0 for w in ws) else 1)
PY

finish
