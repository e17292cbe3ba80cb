#!/usr/bin/env bash
# cli_confusion.sh - `gputrain eval --per-class` and `--confusion FILE`: the per-class table names
# every class with its samples, hits and accuracy, and its totals are the evaluation line's; the
# matrix (JSON or CSV by the file's ending) holds every test sample once, its diagonal the hits,
# and equals the one tools/gputrain_torch.py's numpy forward pass predicts (where numpy imports)
# and, where there is a GPU, the one the CUDA evaluate predicts.
# The file is written whole (atomic_file.c); the checkpoint or a data file is refused as its
# path (exit 2), and train refuses the flags.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
SRC=${GT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
expect_exit 0 -- --data "$DATA" --no-progress --gpus cpu:1 --model mlp --train-samples 2000 --epochs 1 \
    --checkpoint "$TMP/m.st"

expect_exit 0 -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/m.st" --per-class
hits=$(sed -n 's/.* acc [0-9.]* (\([0-9]*\)\/10000)$/\1/p' "$TMP/out")
[ -n "$hits" ] || fail "no evaluation line: $(cat "$TMP/out")"
grep -q '^class  *samples  *correct  *accuracy  *precision  *most often taken for$' "$TMP/out" || fail "no table header: $(cat "$TMP/out")"
for name in T-shirt/top Trouser Pullover Dress Coat Sandal Shirt Sneaker Bag "Ankle boot"; do
    grep -q "^$name  *1000  *[0-9]*  *[0-9.]*  *[0-9.-]*  " "$TMP/out" || fail "no row for $name: $(cat "$TMP/out")"
done
grep -q "^all  *10000  *$hits  *[0-9.]*$" "$TMP/out" || fail "totals are not the evaluation's $hits: $(grep '^all' "$TMP/out")"

for fmt in json csv; do
    expect_exit 0 -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/m.st" --confusion "$TMP/cm.$fmt"
    grep -q "^confusion matrix: $TMP/cm.$fmt$" "$TMP/out" || fail "$fmt: not announced: $(tail -1 "$TMP/out")"
    grep -q "^all  *10000  *$hits " "$TMP/out" || fail "$fmt: no table"
done
python3 - "$TMP/cm.json" "$TMP/cm.csv" "$hits" <<'PY' || fail "the matrices"
import csv, json, sys
j = json.load(open(sys.argv[1]))
rows = list(csv.reader(open(sys.argv[2])))
hits = int(sys.argv[3])
m = j["matrix"]
assert len(j["classes"]) == 10 and j["classes"][9] == "Ankle boot", j["classes"]
assert len(m) == 10 and all(len(r) == 10 for r in m)
assert all(sum(r) == 1000 for r in m), [sum(r) for r in m]   # 1000 test samples a class
assert sum(m[i][i] for i in range(10)) == hits == j["correct"] and j["samples"] == 10000
assert rows[0] == ["true\\predicted"] + j["classes"], rows[0]
assert [r[0] for r in rows[1:]] == j["classes"] and [[int(v) for v in r[1:]] for r in rows[1:]] == m
PY
# the same matrix from an independent forward pass (numpy, tools/gputrain_torch.py)
if python3 -c 'import numpy' 2>/dev/null; then
    PYTHONPATH="$SRC/tools" python3 - "$TMP/m.st" "$DATA" "$TMP/cm.json" <<'PY' || fail "numpy's predictions differ"
import json, sys
import numpy as np
import gputrain_torch as g
forward, _, meta = g.load_numpy(sys.argv[1])
images, labels, names = g.test_set(sys.argv[2])
x = g.input_step(images, meta, sys.argv[1])   # x / 255, then the checkpoint's input_norm
pred = np.concatenate([forward(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
m = np.zeros((10, 10), dtype=int)
np.add.at(m, (labels.astype(int), pred.astype(int)), 1)
mine = np.array(json.load(open(sys.argv[3]))["matrix"])
off = int(np.abs(m - mine).sum())
assert off <= 2, f"{off} samples placed differently"   # a near-tie may round the other way
PY
fi

# on a GPU (where this build and machine have one): the fused LeNet kernels keep no logits, so
# predictions come from the layer path; lenet5 (fused) and mlp (layers) give the CPU's matrix but
# for near-ties that round the other way
if "$BIN" --version | grep -qw cuda && nvidia-smi -L >/dev/null 2>&1; then
    expect_exit 0 -- --data "$DATA" --no-progress --gpus cpu:1 --train-samples 2000 --epochs 1 --checkpoint "$TMP/l.st"
    for ck in l m; do
        expect_exit 0 -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/$ck.st" --confusion "$TMP/$ck-cpu.json"
        expect_exit 0 -- eval --data "$DATA" --gpus 0 --checkpoint "$TMP/$ck.st" --confusion "$TMP/$ck-gpu.json"
        python3 - "$TMP/$ck-cpu.json" "$TMP/$ck-gpu.json" <<'PY' || fail "$ck: the GPU's matrix is not the CPU's"
import json, sys
a, b = (json.load(open(p))["matrix"] for p in sys.argv[1:3])
off = sum(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
assert off <= 4, f"{off} cells apart"
PY
    done
else
    echo "note: no GPU: the CUDA evaluate's predictions are not checked here"
fi

# refused: the checkpoint as the matrix's file, a file in the data folder, the flags in train
expect_error "--confusion and --checkpoint name the same file" -- eval --data "$DATA" --gpus cpu:1 \
    --checkpoint "$TMP/m.st" --confusion "$TMP/m.st"
expect_exit 2 -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/m.st" --confusion "$DATA/t10k-labels-idx1-ubyte.gz"
grep -q "is a file in the data folder" "$TMP/err" || fail "a data file as the matrix: $(cat "$TMP/err")"
expect_error "--confusion" -- --data "$DATA" --gpus cpu:1 --confusion "$TMP/x.csv"
expect_error "--per-class" -- --data "$DATA" --gpus cpu:1 --per-class

[ "$FAILS" -eq 0 ] || exit 1
echo "cli_confusion: ok"
