#!/usr/bin/env bash
# cli_data.sh - the data formats without a dataset installed, end to end on the CPU: a CIFAR-10
# folder written here trains a small colour model for an epoch and predicts with its class names;
# damaged CIFAR files give one-line errors naming the file. Synthetic data: an epoch of the same
# model on it beats chance clearly, also with --augment (the same losses with one worker or two
# under sync) and --normalize (eval and predict normalise alike), a checkpoint of it resumes, and
# bad specs are command-line errors naming the value. 300 classes in a folder train, evaluate and
# predict. --image-size: a folder of colour images of many sizes trains, evaluates and predicts on
# any-size images, the checkpoint saying that its images were resized.
. "$(dirname "$0")/lib_cli.sh"
command -v python3 >/dev/null || { echo "skipped: python3 not found"; exit 77; }
MODEL='conv:8:5 relu maxpool:2 fc:10'

# cifar.py DIR RECORDS: CIFAR-10 files of RECORDS records each, the label i % 10, and its names.
cat >"$TMP/cifar.py" <<'PY'
import os, random, sys
out, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
os.makedirs(out, exist_ok=True)
def batch(name, first):
    with open(os.path.join(out, name), "wb") as f:
        for i in range(first, first + n):
            f.write(bytes([i % 10]) + bytes(rng.randrange(256) for _ in range(3072)))
for b in range(5):
    batch("data_batch_%d.bin" % (b + 1), b * n)
batch("test_batch.bin", 0)
with open(os.path.join(out, "batches.meta.txt"), "w") as f:
    f.write("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n")
PY
python3 "$TMP/cifar.py" "$TMP/c10" 20
CK=$TMP/c10.safetensors
"$BIN" --data "$TMP/c10" --gpus cpu:1 --epochs 1 --batch 10 --model "$MODEL" --no-progress \
    --checkpoint "$CK" >"$TMP/train.out" 2>&1 || fail "CIFAR-10 training failed: $(cat "$TMP/train.out")"
grep -q "100 train / 20 test samples" "$TMP/train.out" || fail "CIFAR-10 header: $(head -1 "$TMP/train.out")"
"$BIN" predict --checkpoint "$CK" --data "$TMP/c10" test:0-1 >"$TMP/pred.out" 2>&1 ||
    fail "predict on CIFAR-10 failed: $(cat "$TMP/pred.out")"
grep -q "^test:1: .*(true: automobile)" "$TMP/pred.out" || fail "predict: $(cat "$TMP/pred.out")"

# Damage: a record cut short, a label past the classes.
head -c 10000 "$TMP/c10/data_batch_2.bin" >"$TMP/cut" && mv "$TMP/cut" "$TMP/c10/data_batch_2.bin"
expect_error "data_batch_2.bin" "not a whole number of 3073-byte CIFAR records" -- \
    --data "$TMP/c10" --gpus cpu:1 --epochs 1 --model "$MODEL"
python3 "$TMP/cifar.py" "$TMP/c10" 20
printf '\x0c' | dd of="$TMP/c10/test_batch.bin" bs=1 seek=3073 conv=notrunc status=none
expect_error "test_batch.bin" "record 1 has label 12" -- --data "$TMP/c10" --gpus cpu:1 --epochs 1 --model "$MODEL"

# Synthetic data: learnable in one epoch, the same data (fingerprint) when resumed.
SYN=(--data synthetic:3x32x32:10:3000 --gpus cpu:1 --model "$MODEL" --no-progress)
"$BIN" "${SYN[@]}" --epochs 1 --checkpoint "$TMP/syn.safetensors" >"$TMP/syn.out" 2>&1 ||
    fail "synthetic training failed: $(cat "$TMP/syn.out")"
acc=$(sed -n 's/^done:.*test acc \([0-9.]*\).*/\1/p' "$TMP/syn.out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }' || fail "synthetic: test accuracy '$acc' after an epoch (chance 0.1)"
"$BIN" "${SYN[@]}" --epochs 2 --resume "$TMP/syn.safetensors" >"$TMP/res.out" 2>&1 ||
    fail "resuming on synthetic data failed: $(cat "$TMP/res.out")"
grep -q "^resuming" "$TMP/res.out" || fail "synthetic resume: $(cat "$TMP/res.out")"
"$BIN" "${SYN[@]/3000/3001}" --epochs 2 --resume "$TMP/syn.safetensors" >"$TMP/res.out" 2>&1 &&
    fail "resumed on other synthetic data"
grep -q "trained on other data" "$TMP/res.out" || fail "synthetic resume on other data: $(cat "$TMP/res.out")"
# Augmentation (crop and flip of the training batches): it still learns, the log records it, and
# the same seed gives the same run whatever the worker count's split of the batches (sync).
"$BIN" "${SYN[@]}" --epochs 1 --augment crop:2,flip --log "$TMP/aug.jsonl" >"$TMP/aug.out" 2>&1 ||
    fail "training with --augment failed: $(cat "$TMP/aug.out")"
acc=$(sed -n 's/^done:.*test acc \([0-9.]*\).*/\1/p' "$TMP/aug.out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.5) }' || fail "--augment: test accuracy '$acc' after an epoch (chance 0.1)"
grep -q '"augment":"crop:2,flip"' "$TMP/aug.jsonl" || fail "--augment: not in the log's config record"
AUG=(--data synthetic:3x32x32:10:400 --model "$MODEL" --no-progress --epochs 1 --mode sync --literal)
aug_losses() { "$BIN" "${AUG[@]}" "$@" 2>&1 | sed -n 's/^epoch.*\(train loss .*acc [0-9.]*\).*samples\/s.*/\1/p'; }
l1=$(aug_losses --gpus cpu:1 --batch 40 --augment crop:3,flip)
l2=$(aug_losses --gpus cpu:2 --batch 20 --augment crop:3,flip)
l0=$(aug_losses --gpus cpu:1 --batch 40)
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "--augment: 1 worker at 40 and 2 at 20 differ: '$l1' / '$l2'"
[ "$l1" != "$l0" ] || fail "--augment crop:3,flip trained exactly as without it: '$l0'"
# --normalize: auto's per-channel statistics reach the log and the checkpoint, and eval and
# predict normalise as training did (their accuracy is the run's last evaluation); a list of the
# wrong length for the data's channels is a command-line error.
NRM0=(--data synthetic:3x16x16:10:200 --model "$MODEL" --no-progress --gpus cpu:1 --batch 50)
NRM=("${NRM0[@]}" --epochs 1)
"$BIN" "${NRM[@]}" --normalize auto --checkpoint "$TMP/norm.st" --log "$TMP/norm.jsonl" >"$TMP/norm.out" 2>&1 ||
    fail "--normalize auto failed: $(cat "$TMP/norm.out")"
grep -q '"normalize":"0\.[0-9]*,0\.[0-9]*,0\.[0-9]*/0\.[0-9]*,0\.[0-9]*,0\.[0-9]*"' "$TMP/norm.jsonl" ||
    fail "--normalize auto: the config record says $(grep -o '"normalize":"[^"]*"' "$TMP/norm.jsonl")"
run_eval=$(sed -n 's/^epoch.*test loss \([0-9.]*\) acc \([0-9.]*\).*/\1 \2/p' "$TMP/norm.out")
"$BIN" eval --checkpoint "$TMP/norm.st" --data synthetic:3x16x16:10:200 --gpus cpu:1 >"$TMP/norm.eval" 2>&1 ||
    fail "eval of a normalised checkpoint: $(cat "$TMP/norm.eval")"
ev=$(sed -n 's/.*test loss \([0-9.]*\) acc \([0-9.]*\).*/\1 \2/p' "$TMP/norm.eval")
[ -n "$ev" ] && [ "$ev" = "$run_eval" ] || fail "--normalize: eval says '$ev', the run '$run_eval'"
acc=$("$BIN" predict --checkpoint "$TMP/norm.st" --data synthetic:3x16x16:10:200 test:0-9999 | sed -n 's/^accuracy \([0-9.]*\).*/\1/p')
[ "$acc" = "${run_eval#* }" ] || fail "--normalize: predict's accuracy '$acc', the run's '${run_eval#* }'"
"$BIN" "${NRM[@]}" --normalize 0.5,0.5,0.5/0.25,0.25,0.25 --checkpoint "$TMP/norm.st" >/dev/null 2>&1 ||
    fail "--normalize with one value per channel failed"
"$BIN" "${NRM[@]}" --normalize 0.5/0.25 >/dev/null 2>&1 || fail "--normalize with one value failed"
"$BIN" "${NRM0[@]}" --epochs 2 --normalize 0.5,0.5,0.5/0.25,0.25,0.25 --resume "$TMP/norm.st" \
    >/dev/null 2>&1 || fail "--resume with the same --normalize failed"
expect_error "--resume" "was trained with input normalisation 0.5,0.5,0.5/0.25,0.25,0.25" -- \
    "${NRM0[@]}" --epochs 3 --normalize auto --resume "$TMP/norm.st"
# without --normalize a resume keeps its checkpoint's input step, whatever today's default: a run
# trained on x / 255 alone (--normalize none) goes on so, and says nothing about it
"$BIN" "${NRM0[@]}" --epochs 3 --resume "$TMP/norm.st" >/dev/null 2>&1 ||
    fail "--resume without --normalize did not keep the checkpoint's"
"$BIN" "${NRM[@]}" --normalize none --checkpoint "$TMP/raw.st" >/dev/null 2>&1 || fail "--normalize none failed"
"$BIN" "${NRM0[@]}" --epochs 2 --resume "$TMP/raw.st" --checkpoint "$TMP/raw2.st" >"$TMP/raw.out" 2>&1 ||
    fail "--resume of an x / 255 checkpoint under the default: $(cat "$TMP/raw.out")"
python3 - "$TMP/raw2.st" <<'PY' || fail "the resumed x / 255 run's checkpoint gained an input_norm"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n)).get("__metadata__", {})
assert "input_norm" not in meta, meta.get("input_norm")
PY
expect_exit 2 -- "${NRM[@]}" --normalize 0.5,0.5/0.25,0.25
expect_error "--normalize 0.5,0.5/0.25,0.25" "2 values per list for 3-channel data" -- "${NRM[@]}" --normalize 0.5,0.5/0.25,0.25
# 300 classes (labels past a byte): a folder of one tiny PNG a class trains, evaluates, and
# predicts; the checkpoint holds the 300 names (in "class_names", which older readers ignore), so
# predict names classes without --data and eval refuses a folder whose names differ.
cat >"$TMP/many.py" <<'PY'
import os, struct, sys, zlib
root = sys.argv[1]
def png(path, v):
    raw = b"".join(b"\0" + bytes([v, 255 - v]) for _ in range(2))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for split in ("train", "test"):
    for k in range(300):
        d = os.path.join(root, split, "k%03d" % k)
        os.makedirs(d, exist_ok=True)
        png(os.path.join(d, "a.png"), k % 256)
PY
python3 "$TMP/many.py" "$TMP/many"
"$BIN" --data "$TMP/many" --model fc:300 --gpus cpu:1 --epochs 1 --batch 30 --no-progress \
    --checkpoint "$TMP/many.st" >"$TMP/many.out" 2>&1 || fail "300 classes: training failed: $(cat "$TMP/many.out")"
grep -q "300 train / 300 test samples" "$TMP/many.out" || fail "300 classes: $(head -1 "$TMP/many.out")"
"$BIN" eval --checkpoint "$TMP/many.st" --data "$TMP/many" --gpus cpu:1 >"$TMP/many.eval" 2>&1 ||
    fail "300 classes: eval failed: $(cat "$TMP/many.eval")"
grep -q "(.*/300)" "$TMP/many.eval" || fail "300 classes: eval says $(cat "$TMP/many.eval")"
"$BIN" predict --checkpoint "$TMP/many.st" --data "$TMP/many" test:299 >"$TMP/many.pred" 2>&1 ||
    fail "300 classes: predict failed: $(cat "$TMP/many.pred")"
grep -q "^test:299: .*(true: k299)" "$TMP/many.pred" || fail "300 classes: predict says $(cat "$TMP/many.pred")"
grep -q "holds no class names" "$TMP/many.eval" "$TMP/many.pred" &&
    fail "300 classes: the checkpoint's names were not checked: $(cat "$TMP/many.eval" "$TMP/many.pred")"
python3 - "$TMP/many.st" <<'PY' || fail "300 classes: the checkpoint's names"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
names = json.loads(meta["class_names"])
assert "classes" not in meta and names == ["k%03d" % k for k in range(300)], names[:3]
PY
"$BIN" predict --checkpoint "$TMP/many.st" --top 2 "$TMP/many/test/k299/a.png" \
    >"$TMP/many.img" 2>&1 || fail "300 classes: predict on a file failed: $(cat "$TMP/many.img")"
grep -Eq "a.png: k[0-9]{3} [0-9.]+, k[0-9]{3} [0-9.]+$" "$TMP/many.img" ||
    fail "300 classes: predict without data does not name classes: $(cat "$TMP/many.img")"
cp -r "$TMP/many" "$TMP/renamed"
mv "$TMP/renamed/train/k299" "$TMP/renamed/train/z299"
mv "$TMP/renamed/test/k299" "$TMP/renamed/test/z299"
expect_error "class 299 is 'k299' in the checkpoint but 'z299'" -- eval --checkpoint "$TMP/many.st" \
    --data "$TMP/renamed" --gpus cpu:1
expect_error "class 299 is 'k299' in the checkpoint but 'z299'" -- predict --checkpoint "$TMP/many.st" \
    --data "$TMP/renamed" test:299
"$BIN" predict --checkpoint "$TMP/many.st" --data "$TMP/renamed" --ignore-classes test:299 \
    >"$TMP/many.ign" 2>&1 || fail "300 classes: predict --ignore-classes failed: $(cat "$TMP/many.ign")"
grep -q "^test:299: .*(true: k299)" "$TMP/many.ign" ||
    fail "300 classes: predict does not name classes from the checkpoint: $(cat "$TMP/many.ign")"
for bad in synthetic:0x32x32:10 synthetic:3x32 synthetic:3x32x32:1 synthetic:3x99999x32:10; do
    expect_exit 2 -- --data "$bad" --gpus cpu:1 --epochs 1
    expect_error "$bad" -- --data "$bad" --gpus cpu:1 --epochs 1
done

# imgs.py DIR: train/ and test/ folders of two classes (reddish, bluish) of PNGs of many sizes.
cat >"$TMP/imgs.py" <<'PY'
import os, random, struct, sys, zlib
out = sys.argv[1]
rng = random.Random(2)
def png(path, w, h, rgb):
    rows = b"".join(b"\0" + bytes(min(255, max(0, c + rng.randrange(-40, 40))) for _ in range(w)
                                  for c in rgb) for _ in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
for split, n in (("train", 30), ("test", 6)):
    for name, rgb in (("blue", (40, 60, 200)), ("red", (200, 50, 40))):
        os.makedirs(os.path.join(out, split, name), exist_ok=True)
        for i in range(n):
            png(os.path.join(out, split, name, "%d.png" % i), rng.randrange(8, 40), rng.randrange(8, 40), rgb)
png(os.path.join(out, "wide.png"), 50, 9, (200, 50, 40))
PY
python3 "$TMP/imgs.py" "$TMP/img"
IMG=(--data "$TMP/img" --gpus cpu:1 --model 'conv:4:3 relu maxpool:2 fc:2' --no-progress)
expect_error "$TMP/img/train" "but the first image" -- "${IMG[@]}" --epochs 1
CK=$TMP/img.safetensors
"$BIN" "${IMG[@]}" --image-size 16 --epochs 2 --batch 8 --checkpoint "$CK" >"$TMP/img.out" 2>&1 ||
    fail "training on resized images failed: $(cat "$TMP/img.out")"
grep -q "60 train / 12 test samples" "$TMP/img.out" || fail "resized images: $(head -1 "$TMP/img.out")"
grep -qa '"resize_images":"1"' "$CK" || fail "the checkpoint does not say its images were resized"
"$BIN" eval --checkpoint "$CK" --data "$TMP/img" --image-size 16 --gpus cpu:1 >"$TMP/eval.out" 2>&1 ||
    fail "eval with --image-size failed: $(cat "$TMP/eval.out")"
"$BIN" predict --checkpoint "$CK" --data "$TMP/img" "$TMP/img/wide.png" test:0-11 >"$TMP/pred.out" 2>&1 ||
    fail "predict on any-size images failed: $(cat "$TMP/pred.out")"
grep -q "wide.png: red" "$TMP/pred.out" || fail "predict wide.png: $(cat "$TMP/pred.out")"
grep -q "^accuracy 1.0000 (12/12)" "$TMP/pred.out" || fail "predict test split: $(cat "$TMP/pred.out")"
expect_error "--image-size 8x8" "takes 16x16" -- predict --checkpoint "$CK" --image-size 8 "$TMP/img/wide.png"
# A checkpoint trained without resizing still predicts on an image of another size, resized, with
# one warning line saying how far from the model's input it is.
"$BIN" predict --checkpoint "$TMP/c10.safetensors" "$TMP/img/wide.png" >"$TMP/far.out" 2>"$TMP/far.err" ||
    fail "predict on a far-off size exited $?: $(cat "$TMP/far.err")"
grep -q "warning: .*wide.png: it is 50x9 pixels, far from the model's 32x32" "$TMP/far.err" ||
    fail "no far-size warning: $(cat "$TMP/far.err")"
expect_error "--image-size" "not HxW or N" -- "${IMG[@]}" --image-size 16x

finish
