#!/usr/bin/env bash
# cli_python_loader.sh - tools/gputrain_torch.py reads a gputrain checkpoint, rebuilds the model from
# its spec and gets the test accuracy `gputrain eval` reports (to 1e-4), for the default lenet5 and
# for a spec with every layer kind. The numpy forward pass is what CI runs (a CPU torch wheel is too
# heavy here); where torch imports, the torch module is checked the same way. Skipped (77) without
# numpy.
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
finish
