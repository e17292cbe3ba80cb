#!/usr/bin/env bash
# cli_python_loader.sh - tools/gputrain_torch.py reads a gputrain checkpoint, rebuilds the model from
# its spec and gets the test accuracy `gputrain eval` reports (to 1e-4), for the default lenet5 (also
# with --normalize auto, which the loader applies from the checkpoint) and for a spec with every
# layer kind. The numpy forward pass is what CI runs (a CPU torch wheel is too
# heavy here); where torch imports, the torch module is checked the same way. A checkpoint whose
# classes or input shape do not fit the data is refused. Skipped (77) without numpy.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
python3 -c 'import numpy' 2>/dev/null || { echo "skipped: python3 cannot import numpy"; exit 77; }
LOADER=${GT_SOURCE_DIR:-$(dirname "$0")/..}/tools/gputrain_torch.py
backends=(numpy)
python3 -c 'import torch' 2>/dev/null && backends+=(torch)

acc_of() { sed -n 's/.*acc \([0-9.]*\) (.*/\1/p' "$1" | tail -1; }
check() { # name gputrain-training-args...
    local name=$1
    shift
    "$BIN" --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 2000 --no-progress --quiet \
        --checkpoint "$TMP/$name.safetensors" "$@" >"$TMP/$name.train" 2>&1 || { fail "$name: training failed: $(cat "$TMP/$name.train")"; return; }
    "$BIN" eval --data "$DATA" --checkpoint "$TMP/$name.safetensors" >"$TMP/$name.eval" 2>&1 || { fail "$name: gputrain eval failed"; return; }
    local want got b
    want=$(acc_of "$TMP/$name.eval")
    for b in "${backends[@]}"; do
        python3 "$LOADER" eval "$TMP/$name.safetensors" --data "$DATA" --backend "$b" >"$TMP/$name.$b" 2>&1 ||
            { fail "$name: loader ($b) failed: $(cat "$TMP/$name.$b")"; continue; }
        got=$(acc_of "$TMP/$name.$b")
        awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= 1e-4 && d >= -1e-4) }' ||
            fail "$name: gputrain eval says acc $want, the $b loader $got"
    done
    echo "$name: gputrain eval $want, loader ${backends[*]}: $got"
}
check lenet5
check normalised --normalize auto
check custom --optimizer adam --lr 5e-3 \
    --model "init:xavier conv:8:3:1 tanh maxpool:2, conv:12:3 relu avgpool:2 dropout:0.3 fc:32 sigmoid fc:10"

# The optimizer state comes back beside the parameters, not among them.
python3 - "$LOADER" "$TMP/lenet5.safetensors" <<'PY' || fail "optimizer state not separate"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gputrain_torch", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
forward, optim, meta = m.load_numpy(sys.argv[2])
assert sorted(optim) == ["c1.bias", "c1.weight", "c2.bias", "c2.weight", "f1.bias", "f1.weight", "f2.bias",
                         "f2.weight", "f3.bias", "f3.weight"], sorted(optim)
assert all(list(s) == ["momentum_buffer"] for s in optim.values())
assert meta["optimizer"] == "sgd"
PY

# A damaged checkpoint is one line and exit 1; a bad command line exits 2.
cp "$TMP/lenet5.safetensors" "$TMP/bad.safetensors"
size=$(wc -c <"$TMP/bad.safetensors")
printf '\x55\x55\x55\x55' | dd of="$TMP/bad.safetensors" bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
python3 "$LOADER" eval "$TMP/bad.safetensors" --data "$DATA" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q CRC "$TMP/err" || fail "damaged file: $(cat "$TMP/err")"
python3 "$LOADER" eval >/dev/null 2>&1
[ $? -eq 2 ] || fail "missing checkpoint argument should exit 2"
python3 "$LOADER" eval "$TMP/lenet5.safetensors" --data "$TMP/nowhere" >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "a missing --data folder: $(cat "$TMP/err")"

# Image folders (read with Pillow): a 3-class folder checkpoint scores on its own folder what
# gputrain eval says, and is refused on Fashion-MNIST, as a lenet5 checkpoint is on the folder; a
# folder with other class names is refused unless --ignore-classes.
if python3 -c 'import PIL' 2>/dev/null; then
    python3 - "$DATA" "$TMP/three" <<'PY' || fail "cannot write the image folder"
import gzip, os, sys
import numpy as np
from PIL import Image
data, root = sys.argv[1], sys.argv[2]
for split, prefix in (("train", "train"), ("test", "t10k")):
    px = np.frombuffer(gzip.open(f"{data}/{prefix}-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
    for k, name in enumerate("abc"):
        os.makedirs(f"{root}/{split}/{name}")
        for i in range(8):
            Image.fromarray(px[3 * i + k]).save(f"{root}/{split}/{name}/{i}.png")
PY
    "$BIN" --data "$TMP/three" --gpus cpu:1 --epochs 2 --batch 4 --no-progress --quiet \
        --checkpoint "$TMP/three.safetensors" >/dev/null 2>&1 || fail "training on the image folder failed"
    "$BIN" eval --data "$TMP/three" --checkpoint "$TMP/three.safetensors" >"$TMP/three.eval" 2>&1 || fail "gputrain eval on the folder failed"
    python3 "$LOADER" eval "$TMP/three.safetensors" --data "$TMP/three" >"$TMP/three.py" 2>&1 || fail "loader on the folder: $(cat "$TMP/three.py")"
    [ -n "$(acc_of "$TMP/three.eval")" ] && [ "$(acc_of "$TMP/three.eval")" = "$(acc_of "$TMP/three.py")" ] ||
        fail "folder: gputrain eval $(cat "$TMP/three.eval"), loader $(cat "$TMP/three.py")"
    python3 "$LOADER" eval "$TMP/three.safetensors" --data "$DATA" >"$TMP/out" 2>"$TMP/err"
    [ $? -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "3 classes" "$TMP/err" ||
        fail "a 3-class checkpoint on Fashion-MNIST: $(cat "$TMP/out" "$TMP/err")"
    python3 "$LOADER" eval "$TMP/lenet5.safetensors" --data "$TMP/three" >"$TMP/out" 2>"$TMP/err"
    [ $? -eq 1 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "lenet5 on a 3-class folder: $(cat "$TMP/out" "$TMP/err")"
    cp -r "$TMP/three" "$TMP/other" && mv "$TMP/other/test/a" "$TMP/other/test/A"
    python3 "$LOADER" eval "$TMP/three.safetensors" --data "$TMP/other" >"$TMP/out" 2>"$TMP/err"
    [ $? -eq 1 ] && grep -q -- "--ignore-classes" "$TMP/err" || fail "other class names: $(cat "$TMP/out" "$TMP/err")"
    python3 "$LOADER" eval "$TMP/three.safetensors" --data "$TMP/other" --ignore-classes >"$TMP/out" 2>"$TMP/err" ||
        fail "--ignore-classes: $(cat "$TMP/err")"
else
    echo "image folders not checked: python3 cannot import PIL"
fi
finish
