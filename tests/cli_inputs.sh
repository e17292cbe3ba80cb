#!/usr/bin/env bash
# cli_inputs.sh - an input that is not a regular file (a FIFO here) is refused at once with one
# line naming it, never opened in a way that blocks: IDX files, --model @FILE, eval --checkpoint,
# --resume and --init. Each run is bounded by a timeout, so a hang fails instead of stalling CI.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
EXPECT_TIMEOUT=20
RUN=(--data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 1 --no-progress)

mkfifo "$TMP/fifo"
expect_error "--model" "$TMP/fifo" "not a regular file" -- "${RUN[@]}" --model "@$TMP/fifo"
expect_error "$TMP/fifo" "not a regular file" -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP/fifo"
expect_error "$TMP/fifo" "not a regular file" -- "${RUN[@]}" --resume "$TMP/fifo"
expect_error "$TMP/fifo" "not a regular file" -- "${RUN[@]}" --init "$TMP/fifo"
expect_error "$TMP" "not a regular file" -- eval --data "$DATA" --gpus cpu:1 --checkpoint "$TMP"

# a data folder whose test labels are a FIFO
mkdir -p "$TMP/d"
cp "$DATA"/*.gz "$TMP/d/"
rm "$TMP/d/t10k-labels-idx1-ubyte.gz"
mkfifo "$TMP/d/t10k-labels-idx1-ubyte.gz"
expect_error "t10k-labels-idx1-ubyte.gz" "not a regular file" -- --data "$TMP/d" --gpus cpu:1 --epochs 1


# an RGB image folder whose class holds a BMP cut short (stb_image decoded it, and the run
# trained): refused naming the file, PNG and JPEG only
for split in train test; do
    for k in a b; do
        mkdir -p "$TMP/f/$split/$k"
        python3 -c "
import struct, sys, zlib
def chunk(kind, body): return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body))
rows = b''.join(b'\0' + bytes((x * 40 + y * 9) % 256 for x in range(18)) for y in range(6))
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 6, 6, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))
" "$TMP/f/$split/$k/0.png" || fail "cannot write a PNG"
    done
done
python3 -c "
import struct, sys
dib = struct.pack('<IiiHHIIiiII', 40, 6, 6, 1, 24, 0, 120, 2835, 2835, 0, 0)
open(sys.argv[1], 'wb').write(b'BM' + struct.pack('<IHHI', 174, 0, 0, 54) + dib + bytes(20))  # 20 of 120 pixel bytes
" "$TMP/f/train/b/1.bmp" || fail "cannot write a BMP"
expect_error "$TMP/f/train/b/1.bmp" "a BMP image" -- --data "$TMP/f" --gpus cpu:1 --epochs 1 --batch 1 --model "fc:2" --no-progress

finish
