#!/usr/bin/env bash
# cli_predict.sh - class names in checkpoints and `gputrain predict`, end to end on the CPU: a
# checkpoint holds Fashion-MNIST's ten names; eval refuses data with other class names unless
# --ignore-classes, and warns on a checkpoint without names; predict prints sorted top-K classes
# whose probabilities sum to 1, the same for a PNG as for the IDX sample it was made from, true
# labels for IDX ranges and, over the whole test split, eval's accuracy exactly; bad inputs give
# one-line errors.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
command -v python3 >/dev/null || { echo "skipped: python3 not found"; exit 77; }
CK=$TMP/m.safetensors
"$BIN" --data "$DATA" --gpus cpu:1 --epochs 1 --train-samples 2000 --no-progress --checkpoint "$CK" \
    >"$TMP/train.out" 2>&1 || fail "training failed: $(cat "$TMP/train.out")"

# The checkpoint's metadata holds the ten names, in label order, as a JSON array.
python3 - "$CK" >"$TMP/names" <<'PY' || fail "no class names in the checkpoint: $(cat "$TMP/names")"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
print("|".join(json.loads(meta["classes"])))
PY
want="T-shirt/top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|Bag|Ankle boot"
[ "$(cat "$TMP/names")" = "$want" ] || fail "class names are '$(cat "$TMP/names")', expected '$want'"

# PNGs from IDX samples: png.py SPLIT INDEX OUT [SIDE] (SIDE crops the sample to SIDExSIDE).
cat >"$TMP/png.py" <<'PY'
import gzip, struct, sys, zlib
data, split, index, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
side = int(sys.argv[5]) if len(sys.argv) > 5 else 28
prefix = "train" if split == "train" else "t10k"
px = gzip.open(f"{data}/{prefix}-images-idx3-ubyte.gz").read()[16 + 784 * index:16 + 784 * (index + 1)]
rows = b"".join(b"\0" + px[28 * y:28 * y + side] for y in range(side))
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
with open(out, "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
png() { python3 "$TMP/png.py" "$DATA" "$@" || fail "cannot write PNG $*"; }
png test 0 "$TMP/t0.png"

# An image folder with ten other class names, one image each in train and test.
for k in 0 1 2 3 4 5 6 7 8 9; do
    for split in train test; do
        mkdir -p "$TMP/other/$split/c$k"
        png "$split" "$k" "$TMP/other/$split/c$k/a.png"
    done
done
expect_error "class 0 is 'T-shirt/top'" "'c0'" "--ignore-classes" -- eval --checkpoint "$CK" --data "$TMP/other" --gpus cpu:1
expect_exit 0 -- eval --checkpoint "$CK" --data "$TMP/other" --gpus cpu:1 --ignore-classes
grep -q 'acc ' "$TMP/out" || fail "eval --ignore-classes printed no accuracy: $(cat "$TMP/out")"
expect_exit 0 -- eval --checkpoint "$CK" --data "$DATA" --gpus cpu:1
eval_line=$(cat "$TMP/out")
[ ! -s "$TMP/err" ] || fail "eval on matching classes printed to stderr: $(cat "$TMP/err")"

# A checkpoint without names (as older versions wrote): eval goes on with one warning line.
python3 - "$CK" "$TMP/old.safetensors" <<'PY' || fail "cannot write a checkpoint without names"
import json, struct, sys, zlib
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
del head["__metadata__"]["classes"]
head["__metadata__"]["header_crc32"] = "00000000"
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
length = struct.pack("<Q", len(text))
crc = "%08x" % zlib.crc32(length + text)
text = text.replace(b'"header_crc32":"00000000"', b'"header_crc32":"' + crc.encode() + b'"')
open(sys.argv[2], "wb").write(length + text + raw[8 + n:])
PY
expect_exit 0 -- eval --checkpoint "$TMP/old.safetensors" --data "$DATA" --gpus cpu:1
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "warning: .*no class names" "$TMP/err" ||
    fail "no one-line warning for a checkpoint without names: $(cat "$TMP/err")"

# predict on a PNG: K classes, sorted, summing to 1 over all ten; the same as its IDX sample.
probs() { sed 's/^[^:]*:[0-9]*:* //; s/ (true: .*)$//' | tr ',' '\n' | awk '{ print $NF }'; }
for k in 1 3 10; do
    expect_exit 0 -- predict --checkpoint "$CK" --top "$k" "$TMP/t0.png"
    [ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "predict --top $k: $(cat "$TMP/out")"
    grep -q "^$TMP/t0.png: " "$TMP/out" || fail "predict does not name the file: $(cat "$TMP/out")"
    [ "$(probs <"$TMP/out" | wc -l)" -eq "$k" ] || fail "predict --top $k printed: $(cat "$TMP/out")"
    probs <"$TMP/out" | sort -rg -c 2>/dev/null || fail "predict --top $k is not sorted: $(cat "$TMP/out")"
done
probs <"$TMP/out" | awk '{ s += $1 } END { exit !(s > 0.998 && s < 1.002) }' ||
    fail "probabilities of all ten classes do not sum to 1: $(cat "$TMP/out")"
png_line=$(sed 's/^[^:]*: //' "$TMP/out")
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" --top 10 test:0
[ "$(head -1 "$TMP/out" | sed 's/^test:0: //; s/ (true: .*)$//')" = "$png_line" ] ||
    fail "the PNG of test:0 and test:0 predict differently: '$png_line' / $(head -1 "$TMP/out")"

# An IDX range: one line per sample with its true label; over the test split, eval's accuracy.
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" test:0-9
[ "$(grep -c '^test:[0-9]: .* (true: [^)]*)$' "$TMP/out")" -eq 10 ] || fail "test:0-9: $(cat "$TMP/out")"
grep -q "^test:0: .*(true: Ankle boot)$" "$TMP/out" || fail "test:0 is an ankle boot: $(head -1 "$TMP/out")"
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" --top 1 test:0-9999
hits=$(awk '/^test:/ { gsub(/^test:[0-9]+: | [0-9.]+ \(true: /, "|"); sub(/\)$/, ""); split($0, f, "|"); n += f[2] == f[3] } END { print n }' "$TMP/out")
eval_hits=$(echo "$eval_line" | sed 's/.*(\([0-9]*\)\/10000)$/\1/')
[ "$hits" = "$eval_hits" ] || fail "predict gets $hits/10000 right, eval $eval_line"
grep -q "^accuracy .* ($eval_hits/10000)" "$TMP/out" || fail "predict's accuracy line: $(tail -1 "$TMP/out")"

# Checkpoints edited on purpose and re-sealed (every CRC recomputed), as a tool could:
cat >"$TMP/reseal.py" <<'PY'
# reseal.py IN OUT [--fc N] [KEY=VALUE | KEY=]...: a copy of checkpoint IN with metadata KEY set
# (KEY= removes it) and, with --fc N, the model replaced by one fc:N layer (small weights), every
# CRC recomputed, as a tool that edits a checkpoint on purpose would.
import json, struct, sys, zlib
args = sys.argv[3:]
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__")
tensors = {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in head.items()}
shapes = {k: v["shape"] for k, v in head.items()}
if args and args[0] == "--fc":
    out, args = int(args[1]), args[2:]
    c, h, w = (int(x) for x in meta["in_shape"].split("x"))
    tensors = {"f1.weight": struct.pack("<%df" % (out * c * h * w), *[((i * 7) % 13 - 6) * 1e-3 for i in range(out * c * h * w)]),
               "f1.bias": struct.pack("<%df" % out, *[0.0] * out)}
    shapes = {"f1.weight": [out, c * h * w], "f1.bias": [out]}
    meta.update({"model_spec": "init:torch fc:%d" % out, "model": "custom", "nclasses": str(out)})
    meta.pop("classes", None)
    meta = {k: v for k, v in meta.items() if not k.startswith("crc32.")}
for a in args:
    k, v = a.split("=", 1)
    if v:
        meta[k] = v
    else:
        meta.pop(k, None)
head, data = {}, b""
for k, t in tensors.items():
    head[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [len(data), len(data) + len(t)]}
    meta["crc32." + k] = "%08x" % zlib.crc32(t)
    data += t
meta["header_crc32"] = "00000000"
head["__metadata__"] = meta
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
length = struct.pack("<Q", len(text))
crc = "%08x" % zlib.crc32(length + text)
text = text.replace(b'"header_crc32":"00000000"', b'"header_crc32":"' + crc.encode() + b'"')
open(sys.argv[2], "wb").write(length + text + data)
PY
reseal() { python3 "$TMP/reseal.py" "$@" || fail "cannot reseal $*"; }

# More classes than a byte can label: predict's buffers follow the class count; past the
# model's limit, one line naming the checkpoint.
reseal "$CK" "$TMP/c300.st" --fc 300
expect_exit 0 -- predict --checkpoint "$TMP/c300.st" --top 3 "$TMP/t0.png"
grep -qE "^$TMP/t0.png: [0-9]+ [0-9.]+, [0-9]+ [0-9.]+, [0-9]+ [0-9.]+$" "$TMP/out" ||
    fail "predict on 300 classes: $(cat "$TMP/out" "$TMP/err")"
reseal "$TMP/c300.st" "$TMP/c70k.st" nclasses=70000
expect_error "checkpoint $TMP/c70k.st" "class count 70000" -- predict --checkpoint "$TMP/c70k.st" "$TMP/t0.png"

# A checkpoint's model_spec is spec text, never a file to read, and exactly as gputrain wrote it.
reseal "$CK" "$TMP/pw.st" model_spec=@/etc/passwd
for cmd in "predict --checkpoint $TMP/pw.st $TMP/t0.png" "eval --checkpoint $TMP/pw.st --data $DATA --gpus cpu:1"; do
    expect_error "checkpoint $TMP/pw.st: model_spec" "'@/etc/passwd': unknown layer" -- $cmd
    ! grep -q "root" "$TMP/err" || fail "gputrain $cmd read /etc/passwd: $(cat "$TMP/err")"
done
reseal "$CK" "$TMP/tanh.st" "model_spec=init:torch conv:6:5:0 tanh avgpool:2 conv:16:5:0 relu avgpool:2 fc:120 relu fc:84 relu fc:10"
expect_error "checkpoint $TMP/tanh.st" "names model lenet5" "edited" -- eval --checkpoint "$TMP/tanh.st" --data "$DATA" --gpus cpu:1
reseal "$CK" "$TMP/short.st" "model_spec=conv:6:5 relu avgpool:2 conv:16:5 relu avgpool:2 fc:120 relu fc:84 relu fc:10"
expect_error "checkpoint $TMP/short.st" "edited" -- predict --checkpoint "$TMP/short.st" "$TMP/t0.png"
# A spec equal to a built-in's is named after it (a hand-written LeNet was saved as "custom").
reseal "$CK" "$TMP/custom.st" model=custom
expect_exit 0 -- eval --checkpoint "$TMP/custom.st" --data "$DATA" --gpus cpu:1
grep -q ": model lenet5[, ]" "$TMP/out" || fail "eval names the model: $(cat "$TMP/out")"

# Control bytes in class names and file names are printed escaped, never raw.
reseal "$CK" "$TMP/esc.st" 'classes=["A\u001b[2J","B","C","D","E","F","G","H","I","J"]'
cp "$TMP/t0.png" "$TMP/e$(printf '\033')x.png"
expect_exit 0 -- predict --checkpoint "$TMP/esc.st" --top 10 "$TMP/e$(printf '\033')x.png"
grep -qF "$TMP/e\x1bx.png: " "$TMP/out" && grep -qF 'A\x1b[2J 0.' "$TMP/out" ||
    fail "predict escapes names: $(cat -v "$TMP/out")"
! grep -q "$(printf '\033')" "$TMP/out" || fail "a raw ESC in predict's output: $(cat -v "$TMP/out")"
expect_error "$TMP/n\x1bx.png" -- predict --checkpoint "$CK" "$TMP/n$(printf '\033')x.png"

# Another size is resized to the model's input; far from it (over 2x, or stretched), or looking
# inverted relative to the training images (light edges where theirs are dark), one warning line.
png test 1 "$TMP/small.png" 20
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" "$TMP/small.png"
[ ! -s "$TMP/err" ] && grep -q "^$TMP/small.png: " "$TMP/out" || fail "20x20: $(cat "$TMP/out" "$TMP/err")"
python3 - "$TMP/t0.png" "$TMP/big.png" "$TMP/inv.png" <<'PY' || fail "cannot write PNGs"
import struct, sys, zlib
raw = open(sys.argv[1], "rb").read()
at = raw.index(b"IDAT")
rows = zlib.decompress(raw[at + 4:at + 4 + struct.unpack(">I", raw[at - 4:at])[0]])
px = [rows[29 * y + 1:29 * y + 29] for y in range(28)]
def png(out, w, h, lines):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    open(out, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                         + chunk(b"IDAT", zlib.compress(b"".join(b"\0" + l for l in lines))) + chunk(b"IEND", b""))
png(sys.argv[2], 112, 112, [bytes(px[y // 4][x // 4] for x in range(112)) for y in range(112)])
png(sys.argv[3], 28, 28, [bytes(255 - v for v in l) for l in px])
PY
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" --top 1 "$TMP/big.png"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "warning: $TMP/big.png: it is 112x112 pixels, far from the model's 28x28" "$TMP/err" ||
    fail "no warning for 112x112: $(cat "$TMP/err")"
[ "$(sed 's/^[^:]*: //; s/ [0-9.]*$//' "$TMP/out")" = "$(echo "$png_line" | sed 's/ [0-9.]*,.*//')" ] ||
    fail "112x112 made of 4x4 blocks of test:0 predicts otherwise: $(cat "$TMP/out") / $png_line"
expect_exit 0 -- predict --checkpoint "$CK" --data "$DATA" "$TMP/inv.png" "$TMP/t0.png"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "warning: $TMP/inv.png: it looks inverted relative to the training images" "$TMP/err" ||
    fail "no single warning for an inverted image: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "an inverted image is still predicted: $(cat "$TMP/out")"
expect_exit 0 -- predict --checkpoint "$CK" --data "$TMP/other" "$TMP/inv.png"
[ ! -s "$TMP/err" ] || fail "data of other classes taken as the training images: $(cat "$TMP/err")"

# Formats: PNG and JPEG only. A BMP (bottom-up, top-down or cut short) is refused naming what it
# is; a JPEG cut short is refused before it is decoded.
cat >"$TMP/bmp.py" <<'PY'
import struct, sys
out, rows, cut = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pal = b"".join(bytes((i, i, i, 0)) for i in range(256))
px = bytes((x * 9) % 256 for x in range(28 * 28))
body = struct.pack("<IiiHHIIiiII", 40, 28, rows, 1, 8, 0, len(px), 2835, 2835, 256, 0) + pal + px
data = b"BM" + struct.pack("<IHHI", 14 + len(body), 0, 0, 14 + 40 + 1024) + body
open(out, "wb").write(data[:len(data) - cut])
PY
for v in "28 0" "-28 0" "28 300"; do
    python3 "$TMP/bmp.py" "$TMP/b.bmp" $v || fail "cannot write a BMP"
    expect_error "$TMP/b.bmp" "a BMP image: gputrain reads PNG and JPEG only" -- predict --checkpoint "$CK" "$TMP/b.bmp"
done
printf '\377\330\377\340\000\020JFIF\000\001\001\000\000\001\000\001\000\000\377\333\000' >"$TMP/cut.jpg"
expect_error "$TMP/cut.jpg" "JPEG cut short" -- predict --checkpoint "$CK" "$TMP/cut.jpg"
# A PNG with empty IDAT chunks (valid) predicts as the same PNG without them; a chunk type that is
# not letters is named by its bytes.
python3 - "$TMP/t0.png" "$TMP/empty_idat.png" "$TMP/badtype.png" <<'PY' || fail "cannot edit the PNG"
import struct, sys, zlib
raw = open(sys.argv[1], "rb").read()
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
at = raw.index(b"IDAT") - 4
n = struct.unpack(">I", raw[at:at + 4])[0]
rest = raw[at + 12 + n:]
open(sys.argv[2], "wb").write(raw[:at] + chunk(b"IDAT", b"") + raw[at:at + 12 + n] + chunk(b"IDAT", b"") + rest)
open(sys.argv[3], "wb").write(raw[:at] + chunk(b"\xc9DAT", raw[at + 8:at + 8 + n]) + rest)
PY
expect_exit 0 -- predict --checkpoint "$CK" --top 10 "$TMP/empty_idat.png"
[ "$(sed 's/^[^:]*: //' "$TMP/out")" = "$png_line" ] || fail "empty IDAT chunks changed the prediction: $(cat "$TMP/out" "$TMP/err")"
expect_error "$TMP/badtype.png" "(bytes c9 44 41 54)" -- predict --checkpoint "$CK" "$TMP/badtype.png"

# Bad input: one line, nonzero, no hang.
export EXPECT_TIMEOUT=30
expect_error "$TMP/none.png" -- predict --checkpoint "$CK" "$TMP/none.png"
expect_error "test:5-2" -- predict --checkpoint "$CK" --data "$DATA" test:5-2
expect_error "test:9990-10000" "0-9999" -- predict --checkpoint "$CK" --data "$DATA" test:9990-10000
expect_error "train:x" -- predict --checkpoint "$CK" train:x
mkfifo "$TMP/fifo"
expect_error "$TMP/fifo" -- predict --checkpoint "$CK" "$TMP/fifo"
expect_error "predict" "image" -- predict --checkpoint "$CK"
expect_error "--checkpoint" -- predict "$TMP/t0.png"
expect_error "$TMP/none.st" -- predict --checkpoint "$TMP/none.st" "$TMP/t0.png"
expect_error "--top" -- predict --checkpoint "$CK" --top 0 "$TMP/t0.png"
finish
