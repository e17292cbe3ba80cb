#!/usr/bin/env bash
# cli_tools.sh - the scripts in tools/: every one answers --help with exit 0 and a bad option with
# exit 2; run.sh says that it builds; jsonl2csv.py reads gputrain logs (non-finite numbers included) into the CSV columns the
# benchmark uses, with time to 0.87, the diverged/stalled flag, startup_s and stale_p99_capped
# (empty where a log lacks them), model and seed from a log's config record; plot.py draws them, and
# one run's loss and accuracy from its log (where matplotlib imports). With the data:
# steps_diff.py on two runs, check_safetensors.py on a checkpoint this build writes. No GPU.
. "$(dirname "$0")/lib_cli.sh"
SRC=${GT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
for t in "$SRC"/tools/*.sh "$SRC"/tools/gpu/*.sh "$SRC"/tools/*.py; do
    case "$(basename "$t")" in lib.sh | run.sh) continue ;; esac # sourced / passes arguments to gputrain
    case "$t" in *.py) run=(python3 "$t") ;; *) run=(bash "$t") ;; esac
    "${run[@]}" --help >"$TMP/help" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -qi usage "$TMP/help" || fail "$(basename "$t") --help: exit $rc, $(head -c 200 "$TMP/help")"
    "${run[@]}" --no-such-option >/dev/null 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$(basename "$t") --no-such-option: exit $rc, not 2"
done

# run.sh says on stderr that it builds before the build's silent minute, then runs the binary with
# its arguments; a failed build shows its log's last lines and exits 1. cmake (and apt-get, should
# anything look missing) are stubs here, in a copy of tools/ whose build/ is the test's own.
mkdir -p "$TMP/repo/tools" "$TMP/stub"
cp "$SRC/tools/run.sh" "$SRC/tools/deps.sh" "$TMP/repo/tools/"
cat >"$TMP/stub/cmake" <<'SH'
#!/usr/bin/env bash
[ -n "${STUB_FAIL:-}" ] && { echo "error: the stub build fails"; exit 1; }
[ "$1" = --build ] && printf '#!/bin/sh\necho "gputrain ran: $*"\n' >"$2/gputrain" && chmod +x "$2/gputrain"
exit 0
SH
printf '#!/bin/sh\nexit 0\n' >"$TMP/stub/apt-get"
chmod +x "$TMP/stub/cmake" "$TMP/stub/apt-get"
PATH="$TMP/stub:$PATH" bash "$TMP/repo/tools/run.sh" --epochs 1 >"$TMP/run.out" 2>"$TMP/run.err" </dev/null
rc=$?
[ $rc -eq 0 ] && grep -q '^gputrain: building ' "$TMP/run.err" && [ "$(cat "$TMP/run.out")" = 'gputrain ran: --epochs 1' ] ||
    fail "run.sh: exit $rc, stdout '$(cat "$TMP/run.out")', stderr '$(cat "$TMP/run.err")'"
STUB_FAIL=1 PATH="$TMP/stub:$PATH" bash "$TMP/repo/tools/run.sh" >"$TMP/run.out" 2>"$TMP/run.err" </dev/null
rc=$?
[ $rc -eq 1 ] && grep -q 'the stub build fails' "$TMP/run.err" && grep -q 'build failed' "$TMP/run.err" ||
    fail "run.sh, failed build: exit $rc, stderr '$(cat "$TMP/run.err")'"

# Three runs of one mode: one learns, one stalls at chance, one goes non-finite.
mkdir -p "$TMP/logs"
ev() { # epoch samples wall test_acc train_loss
    printf '{"type":"eval","epoch":%s,"step":%s,"samples":%s,"wall_s":%s,"train_loss":%s,"train_acc":0.5,"test_loss":1.0,"test_acc":%s,"lr":0.05,"mode":"hogwild","workers":2}\n' \
        "$1" "$2" "$2" "$3" "$5" "$4"
}
sm() { printf '{"type":"summary","mode":"hogwild","workers":2,"samples":%s,"wall_s":%s,"samples_per_s":%s,"test_acc":%s,"interrupted":0}\n' "$@"; }
{ ev 1 1000 1.0 0.80 0.6; ev 2 2000 2.0 0.88 0.4; sm 2000 2.0 1000 0.88 | sed 's/}$/,"startup_s":0.4210,"stale_p99":63,"stale_p99_capped":true}/'; } >"$TMP/logs/lenet5__hogwild__w2__s1.jsonl"
{ ev 1 1000 1.0 0.10 2.30; ev 2 2000 2.0 0.10 2.30; sm 2000 2.0 1000 0.10; } >"$TMP/logs/lenet5__hogwild__w2__s2.jsonl"
{ ev 1 1000 1.0 0.70 0.9; ev 2 2000 2.0 0.10 nan; sm 2000 2.0 1000 0.10; } >"$TMP/logs/lenet5__hogwild__w2__s3.jsonl"
echo 0 | tee "$TMP/logs/"*.rc >/dev/null
python3 "$SRC/tools/jsonl2csv.py" "$TMP/logs" "$TMP/out" 2>"$TMP/err" || fail "jsonl2csv.py: $(cat "$TMP/err")"
col() { # file run column
    python3 -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r.get("run", r.get("label")) == sys.argv[2]: print(r[sys.argv[3]])' "$@"
}
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s1 flag)" = "" ] || fail "a run that learned is flagged"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s2 flag)" = stalled ] || fail "a run at chance is not flagged stalled"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s3 flag)" = diverged ] || fail "a run with a nan loss is not flagged diverged"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s1 time_to_087)" = 2.0 ] || fail "time_to_087 of s1 is not 2.0"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s1 samples_to_087)" = 2000 ] || fail "samples_to_087 of s1 is not 2000"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s2 time_to_087)" = "" ] || fail "s2 never reached 0.87"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s1 startup_s)" = 0.4210 ] || fail "startup_s of s1 is not 0.4210"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s2 startup_s)" = "" ] || fail "s2 logged no startup_s, yet has one"
[ "$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s1 stale_p99_capped)/$(col "$TMP/out/runs.csv" lenet5__hogwild__w2__s2 stale_p99_capped)" = true/ ] ||
    fail "stale_p99_capped of s1/s2 is not true/(empty)"
[ "$(col "$TMP/out/aggregate.csv" hogwild runs_stalled)/$(col "$TMP/out/aggregate.csv" hogwild runs_diverged)" = 1/1 ] ||
    fail "aggregate.csv does not count 1 stalled and 1 diverged run"
[ "$(col "$TMP/out/aggregate.csv" hogwild final_acc_mean)" = 0.36 ] || fail "final_acc_mean is not 0.36"
# A log under any other name: model, seed, mode and workers come from its config record, and the
# curve is named after them (model__name__wN), with no empty parts.
mkdir -p "$TMP/single"
{ echo '{"type":"config","mode":"sync","workers":2,"model":"lenet5","nclasses":10,"train_samples":1000,"seed":7}'
  ev 1 1000 1.0 0.80 0.6; ev 2 2000 2.0 0.88 0.4; sm 2000 2.0 1000 0.88; } >"$TMP/single/run.jsonl"
python3 "$SRC/tools/jsonl2csv.py" "$TMP/single" "$TMP/single-out" 2>"$TMP/err" || fail "jsonl2csv.py on run.jsonl: $(cat "$TMP/err")"
[ "$(col "$TMP/single-out/runs.csv" run model)/$(col "$TMP/single-out/runs.csv" run seed)" = lenet5/7 ] ||
    fail "runs.csv model/seed of run.jsonl: $(cat "$TMP/single-out/runs.csv")"
[ "$(ls "$TMP/single-out/curves")/$(ls "$TMP/single-out/throughput")" = lenet5__run__w2.csv/lenet5__run.csv ] ||
    fail "output names: $(ls "$TMP/single-out/curves" "$TMP/single-out/throughput")"
if python3 -c 'import matplotlib' 2>/dev/null; then
    python3 "$SRC/tools/plot.py" "$TMP/single/run.jsonl" 2>"$TMP/err" || fail "plot.py RUN.jsonl: $(cat "$TMP/err")"
    [ "$(head -c 4 "$TMP/single/run.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "plot.py RUN.jsonl wrote no RUN.png"
    python3 "$SRC/tools/plot.py" "$TMP/single/none.jsonl" 2>"$TMP/err"
    [ $? -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "plot.py on a missing log: $(cat "$TMP/err")"
    python3 "$SRC/tools/plot.py" --out "$TMP/a.png" --ymin 0.6 --chance 0.1 \
        "hogwild=$TMP/out/curves/lenet5__hogwild__w2.csv:samples_mean:test_acc_mean:test_acc_min:test_acc_max" 2>"$TMP/err" ||
        fail "plot.py: $(cat "$TMP/err")"
    [ "$(head -c 4 "$TMP/a.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "plot.py wrote no PNG"
    python3 "$SRC/tools/plot.py" --out "$TMP/b.png" "x=$TMP/out/runs.csv:run:nope" 2>/dev/null
    [ $? -eq 1 ] || fail "plot.py on a missing column should exit 1"
else
    echo "plot.py not checked: python3 cannot import matplotlib"
fi
# steps_diff.py: two CPU sync runs of one command log the same per-step losses (8 steps x 2
# workers); another seed does not.
if DATA=$(find_data); then
    for k in a b; do
        "$BIN" --data "$DATA" --gpus cpu:2 --mode sync --epochs 1 --train-samples 1024 --no-progress \
            --log-steps --log "$TMP/steps-$k.jsonl" >/dev/null 2>&1 || fail "steps run $k failed"
    done
    "$BIN" --data "$DATA" --gpus cpu:2 --mode sync --epochs 1 --train-samples 1024 --no-progress \
        --seed 2 --log-steps --log "$TMP/steps-c.jsonl" >/dev/null 2>&1 || fail "steps run c failed"
    python3 "$SRC/tools/steps_diff.py" --out "$TMP/steps.md" "$TMP/steps-a.jsonl" "$TMP/steps-b.jsonl" >"$TMP/sd" 2>&1 ||
        fail "steps_diff: the same run differs: $(cat "$TMP/sd")"
    grep -q '| 16 | 16 | identical |' "$TMP/steps.md" || fail "steps_diff table: $(cat "$TMP/steps.md")"
    python3 "$SRC/tools/steps_diff.py" "$TMP/steps-a.jsonl" "$TMP/steps-c.jsonl" >"$TMP/sd" 2>&1
    [ $? -eq 1 ] && grep -q 'first difference' "$TMP/sd" || fail "steps_diff: seeds 1 and 2 alike: $(cat "$TMP/sd")"
    python3 "$SRC/tools/steps_diff.py" "$TMP/steps-a.jsonl" "$TMP/nothing.jsonl" >"$TMP/sd" 2>&1
    [ $? -eq 1 ] && grep -q 'nothing.jsonl' "$TMP/sd" || fail "steps_diff: a missing log: $(cat "$TMP/sd")"

    # check_safetensors.py: a checkpoint this gputrain writes passes (format, header CRC, each
    # tensor's CRC); a changed header byte or tensor byte is a mismatch, exit 1.
    "$BIN" --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 512 --no-progress --quiet \
        --checkpoint "$TMP/ck.safetensors" >/dev/null 2>&1 || fail "checkpoint run failed"
    python3 "$SRC/tools/check_safetensors.py" "$TMP/ck.safetensors" >"$TMP/cs" 2>&1 ||
        fail "check_safetensors.py refuses a current checkpoint: $(head -c 400 "$TMP/cs")"
    [ "$(grep -c ' ok$' "$TMP/cs")" -eq 20 ] || fail "check_safetensors.py: not 20 tensors ok: $(cat "$TMP/cs")"
    sed 's/"model":"lenet5"/"model":"lenet6"/' "$TMP/ck.safetensors" >"$TMP/hdr.safetensors"
    python3 "$SRC/tools/check_safetensors.py" "$TMP/hdr.safetensors" >"$TMP/cs" 2>&1
    [ $? -eq 1 ] && grep -q 'header_crc32 MISMATCH' "$TMP/cs" || fail "check_safetensors.py: changed header: $(cat "$TMP/cs")"
    cp "$TMP/ck.safetensors" "$TMP/data.safetensors"
    printf '\x55' | dd of="$TMP/data.safetensors" bs=1 seek=$(($(wc -c <"$TMP/ck.safetensors") - 3)) conv=notrunc 2>/dev/null
    python3 "$SRC/tools/check_safetensors.py" "$TMP/data.safetensors" >"$TMP/cs" 2>&1
    [ $? -eq 1 ] && grep -q 'CRC MISMATCH' "$TMP/cs" || fail "check_safetensors.py: changed tensor: $(cat "$TMP/cs")"
    python3 "$SRC/tools/check_safetensors.py" "$TMP/none.safetensors" >"$TMP/cs" 2>&1
    [ $? -eq 1 ] && [ "$(wc -l <"$TMP/cs")" -eq 1 ] || fail "check_safetensors.py: a missing file: $(cat "$TMP/cs")"
fi

finish
