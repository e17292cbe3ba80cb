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

finish
