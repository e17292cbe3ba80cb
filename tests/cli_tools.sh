#!/usr/bin/env bash
# cli_tools.sh - the scripts in tools/: every one answers --help with exit 0 and a bad option with
# exit 2; run.sh says that it builds; jsonl2csv.py reads gputrain logs (non-finite numbers included) into the CSV columns the
# benchmark uses, with time to 0.87, the diverged/stalled flag, startup_s and stale_p99_capped
# (empty where a log lacks them), model and seed from a log's config record; plot.py draws them, and
# one run's loss and accuracy from its log (where matplotlib imports). With the data:
# steps_diff.py on two runs, check_safetensors.py on a checkpoint this build writes; ncu_sum.py on
# a CSV the test writes; trace_steps.py on a timeline the test writes. Without data:
# a resnet20 checkpoint written in gputrain's layout (batch norm's buffers included) through
# check_safetensors.py and gputrain_torch.py (numpy, and torch where it imports). No GPU.
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

# trace_steps.py: a cupti_trace timeline of 20 steps, each 1000 us from one loss kernel to the next:
# kernels 0-300 and 500-800 us (two streams overlapping at 200-300), a 100 us upload of 2 MB and a
# 50 us download of 1 MB: 600 us of kernels, 400 us idle over the 19 steps between the 20 loss
# kernels; a row that is not the tracer's is refused.
python3 - "$TMP/trace.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(20):
        t = 1_000_000 + i * 1_000_000
        f.write(f"K,{t},{t + 10_000},7,softmax_xent_kernel\n")
        f.write(f"K,{t + 10_000},{t + 300_000},7,conv\nK,{t + 200_000},{t + 250_000},9,wgrad\n")
        f.write(f"K,{t + 500_000},{t + 800_000},7,bn\nM,{t + 850_000},{t + 950_000},7,2000000,1\n")
        f.write(f"M,{t + 300_000},{t + 350_000},8,1000000,2\nS,{t + 400_000},{t + 401_000},7\n")
    # the host's calls: an instantiation of 2 ms before step 1, a launch each step after it
    f.write("A,0,2000000,5,cudaGraphInstantiate_v12000\n")
    for i in range(1, 20):
        f.write(f"A,{1_000_000 + i * 1_000_000 - 4_000},{1_000_000 + i * 1_000_000 - 3_000},5,cudaGraphLaunch\n")
PY
python3 "$SRC/tools/trace_steps.py" --from 0 --to 1 "$TMP/trace.csv" >"$TMP/trace.out" 2>&1 ||
    fail "trace_steps.py: $(cat "$TMP/trace.out")"
grep -q ': 19 steps; median period 1000 us, kernels 600 us, idle 400 us; host to device 100 us 2.0 MB; device to host 50 us 1.0 MB$' "$TMP/trace.out" ||
    fail "trace_steps.py's summary: $(cat "$TMP/trace.out")"
# --api 3: the calls from 1 ms before step 1's loss kernel (t = 1 ms) to step 3's, in time order
python3 "$SRC/tools/trace_steps.py" --api 3 --before 1 "$TMP/trace.csv" >"$TMP/trace.out" 2>&1 ||
    fail "trace_steps.py --api: $(cat "$TMP/trace.out")"
grep -q '^| -1.00 | 2.000 | 5 | cudaGraphInstantiate_v12000 |$' "$TMP/trace.out" &&
    grep -q '^| 1.00 | 0.001 | 5 | cudaGraphLaunch |$' "$TMP/trace.out" &&
    [ "$(grep -c "| cudaGraphLaunch |" "$TMP/trace.out")" = 2 ] &&
    grep -q '^window totals: cudaGraphInstantiate_v12000 2.0 ms, cudaGraphLaunch 0.0 ms$' "$TMP/trace.out" &&
    grep -q '^kernels ran 1.2 ms of the window.s 3.0 ms$' "$TMP/trace.out" ||
    fail "trace_steps.py --api: $(cat "$TMP/trace.out")"
# --step: one step whole, in time order from its loss kernel, the host's launch in it too
python3 "$SRC/tools/trace_steps.py" --step --from 0 --to 1 "$TMP/trace.csv" >"$TMP/trace.out" 2>&1 ||
    fail "trace_steps.py --step: $(cat "$TMP/trace.out")"
grep -q 'step 10 of 20, 1000.0 us from its .xent. kernel to the next' "$TMP/trace.out" &&
    grep -q '^| 200.0 | 250.0 | 50.0 | s9 | wgrad |$' "$TMP/trace.out" &&
    grep -q '^| 850.0 | 950.0 | 100.0 | s7 | copy host to device 2.00 MB |$' "$TMP/trace.out" &&
    grep -q '^| 996.0 | 997.0 | 1.0 | t5 | call cudaGraphLaunch |$' "$TMP/trace.out" &&
    [ "$(grep -c '^| ' "$TMP/trace.out")" = 9 ] ||
    fail "trace_steps.py --step: $(cat "$TMP/trace.out")"
echo "X,1,2" >>"$TMP/trace.csv"
python3 "$SRC/tools/trace_steps.py" "$TMP/trace.csv" >"$TMP/trace.out" 2>&1 && fail "trace_steps.py took a row that is not the tracer's"
grep -q 'trace.csv:161: not a cupti_trace row' "$TMP/trace.out" || fail "trace_steps.py's refusal: $(cat "$TMP/trace.out")"

# ncu_sum.py sums an Nsight Compute CSV's kernel times by name (the kernel's arguments dropped),
# largest first, with the share and the launch count; a CSV without time rows is an error.
cat >"$TMP/ncu.csv" <<'CSV'
==PROF== Connected to process 1 (step_bench)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","step_bench","h","void k_a<float>(int, const float *)","1","13","(256, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","1,000"
"1","1","step_bench","h","k_b(int)","1","13","(256, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","3,000"
"2","1","step_bench","h","void k_a<float>(int, const float *)","1","13","(256, 1, 1)","(4, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","4,000"
CSV
python3 "$SRC/tools/ncu_sum.py" "$TMP/ncu.csv" >"$TMP/ncu.out" 2>&1 || fail "ncu_sum.py: $(cat "$TMP/ncu.out")"
grep -q '3 kernels, 8 us in all' "$TMP/ncu.out" && sed -n 2p "$TMP/ncu.out" | grep -q '5 us  62.5%     2x  void k_a<float>' &&
    sed -n 3p "$TMP/ncu.out" | grep -q '3 us  37.5%     1x  k_b' || fail "ncu_sum.py's table: $(cat "$TMP/ncu.out")"
head -2 "$TMP/ncu.csv" >"$TMP/ncu-empty.csv"
python3 "$SRC/tools/ncu_sum.py" "$TMP/ncu-empty.csv" >/dev/null 2>&1 && fail "ncu_sum.py took a CSV without times"

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
    # 10 parameter tensors, their momentum and their moving average (on by default for lenet5)
    [ "$(grep -c ' ok$' "$TMP/cs")" -eq 30 ] || fail "check_safetensors.py: not 30 tensors ok: $(cat "$TMP/cs")"
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

# Residual checkpoints, written here as gputrain lays them out (parameters, batch norm's buffers
# with num_batches_tracked an I64 scalar, optimizer state; every CRC): check_safetensors.py passes
# them; gputrain_torch.py rebuilds resnet20 from its spec and its numpy forward pass gives what a
# forward pass written here from the architecture alone (shift-and-add convolutions) gives; an F32
# one-element count reads as int64 too; a missing buffer is refused by name. Where torch imports,
# torch_resnet.py's ResNet (what load_torch builds for resnet20) and the spec-driven module load
# the state strictly and agree with numpy. Needs numpy, no data.
if python3 -c 'import numpy' 2>/dev/null; then
    python3 - "$SRC/tools" "$TMP" <<'PY' >"$TMP/res.out" 2>&1 || fail "residual checkpoints: $(tail -n 5 "$TMP/res.out")"
import json, struct, subprocess, sys, zlib
import numpy as np
tools, tmp = sys.argv[1], sys.argv[2]
sys.path.insert(0, tools)
import gputrain_torch as g
import torch_resnet as tr


def write(path, meta, tensors):
    """A gputrain-2 checkpoint: crc32.<name> of each tensor's bytes, header_crc32 over the length
    and the header with its own digits as zeros."""
    header, blobs, off = {}, [], 0
    meta = dict(meta, format="gputrain-2", header_crc32="00000000")
    for name, arr in tensors.items():
        blob = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": {"f": "F32", "i": "I64"}[arr.dtype.kind], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(blob)]}
        meta["crc32." + name] = f"{zlib.crc32(blob):08x}"
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(dict(__metadata__=meta, **header), separators=(",", ":")).encode()
    lenb = struct.pack("<Q", len(text))
    crc = zlib.crc32(text, zlib.crc32(lenb)) & 0xFFFFFFFF
    text = text.replace(b'"header_crc32":"00000000"', f'"header_crc32":"{crc:08x}"'.encode())
    with open(path, "wb") as f:
        f.write(lenb + text + b"".join(blobs))


rng = np.random.default_rng(5)
in_shape, spec = (1, 12, 12), tr.gputrain_spec("resnet20")
layers = g.parse_spec(spec, in_shape)
params, buffers = g.expected_tensors(layers)
state = {}
for k, s in {**params, **buffers}.items():
    if k.endswith("num_batches_tracked"):
        state[k] = np.array(37, dtype=np.int64)
    elif k.endswith("running_var"):
        state[k] = rng.uniform(0.5, 2.0, s).astype(np.float32)
    else:
        fan = int(np.prod(s[1:])) if len(s) > 1 else 1
        state[k] = (rng.standard_normal(s) / np.sqrt(fan)).astype(np.float32)
tensors = dict(state, **{"optim.momentum_buffer.fc.weight": np.zeros((10, 64), np.float32)})
meta = {"model": "resnet20", "model_spec": spec, "in_shape": "x".join(map(str, in_shape)), "nclasses": "10",
        "optimizer": "sgd", "mode": "sync", "epoch": "1", "step": "1", "samples": "1"}
write(f"{tmp}/r20.safetensors", meta, tensors)
cs = subprocess.run([sys.executable, f"{tools}/check_safetensors.py", f"{tmp}/r20.safetensors"], capture_output=True,
                    text=True)
assert cs.returncode == 0 and cs.stdout.count(" ok\n") == len(tensors), cs.stdout + cs.stderr
assert "layers.8.b2.num_batches_tracked          int64    scalar" in cs.stdout, cs.stdout

# The architecture alone: stem, 3 stages of 3 basic blocks (16, 32, 64; strides 1, 2, 2), gap, fc.
P = state


def conv(x, w, stride):
    k = w.shape[2]
    p = k // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    ho, wo = (x.shape[2] + 2 * p - k) // stride + 1, (x.shape[3] + 2 * p - k) // stride + 1
    y = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for i in range(k):
        for j in range(k):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride], w[:, :, i, j])
    return y


def bn(x, n):
    sh = (1, -1, 1, 1)
    return (x - P[n + ".running_mean"].reshape(sh)) / np.sqrt(P[n + ".running_var"].reshape(sh) + 1e-5) * \
        P[n + ".weight"].reshape(sh) + P[n + ".bias"].reshape(sh)


def reference(x):
    x = np.maximum(bn(conv(x, P["stem.0.weight"], 1), "stem.1"), 0)
    b = 0
    for c, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            s, n = (stride if i == 0 else 1), f"layers.{b}"
            y = np.maximum(bn(conv(x, P[n + ".c1.weight"], s), n + ".b1"), 0)
            y = bn(conv(y, P[n + ".c2.weight"], 1), n + ".b2")
            short = bn(conv(x, P[n + ".short.0.weight"], s), n + ".short.1") if n + ".short.0.weight" in P else x
            x, b = np.maximum(y + short, 0), b + 1
    return x.mean(axis=(2, 3)) @ P["fc.weight"].T.astype(np.float64) + P["fc.bias"]


x = rng.uniform(0, 1, (6,) + in_shape).astype(np.float32)
want = reference(x)
forward, optim, meta2 = g.load_numpy(f"{tmp}/r20.safetensors")
got = forward(x)
assert np.abs(got - want).max() < 1e-3 * max(1.0, np.abs(want).max()), (got, want)
assert list(optim) == ["fc.weight"] and meta2["model"] == "resnet20"
print("numpy forward of resnet20 matches the architecture: max diff", float(np.abs(got - want).max()))

# The count as one F32 element reads as the same int64 scalar; a missing buffer is refused.
t2 = dict(tensors, **{"layers.0.b1.num_batches_tracked": np.array([37.0], np.float32)})
write(f"{tmp}/r20f.safetensors", meta, t2)
_, t2r = g.read_safetensors(f"{tmp}/r20f.safetensors")
st, _ = g.split_state(t2r, layers, "r20f")
assert st["layers.0.b1.num_batches_tracked"].dtype == np.int64 and st["layers.0.b1.num_batches_tracked"].shape == ()
t3 = {k: v for k, v in tensors.items() if k != "layers.4.b2.running_var"}
write(f"{tmp}/r20m.safetensors", meta, t3)
try:
    g.load_numpy(f"{tmp}/r20m.safetensors")
    raise AssertionError("a checkpoint without layers.4.b2.running_var loaded")
except g.CheckpointError as e:
    assert "layers.4.b2.running_var" in str(e), e

try:
    import torch
except ImportError:
    print("torch modules not checked: python3 cannot import torch")
    sys.exit(0)
model, _, _ = g.load_torch(f"{tmp}/r20.safetensors")
generic, _, _ = g.load_torch(f"{tmp}/r20.safetensors", generic=True)
assert type(model).__name__ == "ResNet" and type(generic).__name__ == "GputrainNet"
assert model.state_dict()["layers.0.b1.num_batches_tracked"].dtype == torch.int64
assert list(model.state_dict()) == list(generic.state_dict())
with torch.no_grad():
    for m in (model, generic):
        out = m(torch.from_numpy(x)).double().numpy()
        assert np.abs(out - want).max() < 1e-3 * max(1.0, np.abs(want).max()), (type(m).__name__, out, want)
print("torch: ResNet and the spec-driven module load strictly and match")
PY
    cat "$TMP/res.out"
else
    echo "residual checkpoints not checked: python3 cannot import numpy"
fi

finish
