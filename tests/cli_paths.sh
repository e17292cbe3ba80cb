#!/usr/bin/env bash
# cli_paths.sh - checkpoint and log paths are checked before training starts: what is not a
# regular file is never replaced, temporary names fit NAME_MAX, a trailing '/' or a folder is
# refused, long paths keep the reason in the message, --keep's rotation targets are checked as the
# checkpoint is and a second run's save keeps the first's, the log is no input and none of the
# checkpoint's files, a second
# run writing the same checkpoint is refused (flock), and temporary files of killed runs are removed.
. "$(dirname "$0")/lib_cli.sh"
DATA=$(find_data) || { echo "skipped: Fashion-MNIST not found"; exit 77; }
ONE=(--data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 1 --no-progress)
TWO=(--data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 2 --no-progress)
# A refusal must come before training: with this many epochs a late one would time out.
LONG=(--data "$DATA" --gpus cpu:1 --train-samples 200 --epochs 100000 --no-progress)

# 1: a symlink, a FIFO or a folder at the checkpoint path is refused and left as it was
echo precious >"$TMP/target"
ln -s "$TMP/target" "$TMP/link"
expect_error "$TMP/link" "symbolic link" -- "${LONG[@]}" --checkpoint "$TMP/link"
[ -L "$TMP/link" ] && [ "$(cat "$TMP/target")" = precious ] || fail "the symlink or its target changed"
mkfifo "$TMP/fifo"
expect_error "$TMP/fifo" "a FIFO" -- "${LONG[@]}" --checkpoint "$TMP/fifo"
[ -p "$TMP/fifo" ] || fail "the FIFO was replaced"
mkdir "$TMP/dir"
expect_error "$TMP/dir" "a folder" -- "${LONG[@]}" --checkpoint "$TMP/dir"
# a device node of our own (never the system's /dev/null: a broken build would replace it)
if mknod "$TMP/null" c 1 3 2>/dev/null; then
    expect_error "$TMP/null" "a device" -- "${LONG[@]}" --checkpoint "$TMP/null"
    [ -c "$TMP/null" ] || fail "the device node was replaced"
fi

# --keep's rotation targets PATH.1 .. PATH.K are checked before training as PATH is, and left as
# they were
mkdir "$TMP/rot.1"
expect_error "$TMP/rot.1" "a folder" -- "${LONG[@]}" --checkpoint "$TMP/rot" --keep 1
mkfifo "$TMP/rotf.1"
if mknod "$TMP/rotf.2" c 1 3 2>/dev/null; then
    expect_error "$TMP/rotf.1" "a FIFO" -- "${LONG[@]}" --checkpoint "$TMP/rotf" --keep 2
    [ -p "$TMP/rotf.1" ] && [ -c "$TMP/rotf.2" ] || fail "the FIFO or the device node at PATH.1, PATH.2 was replaced"
fi
# a second run ending at the first one's position rotates the first one's checkpoint to PATH.1
expect_exit 0 -- "${ONE[@]}" --seed 1 --checkpoint "$TMP/twice" --keep 1
cp "$TMP/twice" "$TMP/twice.first"
expect_exit 0 -- "${ONE[@]}" --seed 2 --checkpoint "$TMP/twice" --keep 1
cmp -s "$TMP/twice.1" "$TMP/twice.first" || fail "the first run's checkpoint was not kept as PATH.1"

# 7: a trailing '/' is refused at start; a 250-byte file name saves; a long path keeps the reason
expect_error "ends in '/'" -- "${LONG[@]}" --checkpoint "$TMP/ck/"
name250=$(printf 'c%.0s' $(seq 1 250))
expect_exit 0 -- "${ONE[@]}" --checkpoint "$TMP/$name250" --keep 2
[ -f "$TMP/$name250" ] || fail "250-byte checkpoint name: nothing saved: $(cat "$TMP/err")"
expect_exit 0 -- "${TWO[@]}" --checkpoint "$TMP/$name250" --keep 2 --resume "$TMP/$name250"
[ -f "$TMP/$name250.1" ] || fail "250-byte checkpoint name: no rotated copy"
deep="$TMP/$(printf 'd%.0s' $(seq 1 200))/$(printf 'e%.0s' $(seq 1 200))/$(printf 'f%.0s' $(seq 1 200))"
expect_error "No such file or directory" -- "${LONG[@]}" --checkpoint "$deep/ck"

# 9: the log may not be the checkpoint written or the one resumed (a command-line error: exit 2)
expect_exit 2 -- "${LONG[@]}" --checkpoint "$TMP/same" --log "$TMP/same"
grep -q "same file" "$TMP/err" || fail "--log = --checkpoint: $(cat "$TMP/err")"
expect_exit 0 -- "${ONE[@]}" --checkpoint "$TMP/ck"
cp "$TMP/ck" "$TMP/ck.copy"
expect_exit 2 -- "${LONG[@]}" --resume "$TMP/ck" --log "$TMP/./ck"
cmp -s "$TMP/ck" "$TMP/ck.copy" || fail "--log = --resume: the checkpoint was written to"

# nor any input, nor a rotated copy of the checkpoint, nor a file in the data folder
cp "$TMP/ck" "$TMP/init.st"
cp "$TMP/ck" "$TMP/init.copy"
expect_exit 2 -- "${LONG[@]}" --init "$TMP/init.st" --log "$TMP/init.st"
grep -q -- "--log and --init name the same file" "$TMP/err" || fail "--log = --init: $(cat "$TMP/err")"
cmp -s "$TMP/init.st" "$TMP/init.copy" || fail "--log = --init: the checkpoint was written to"
echo "fc:10" >"$TMP/spec.txt"
expect_exit 2 -- "${LONG[@]}" --model "@$TMP/spec.txt" --log "$TMP/spec.txt"
[ "$(cat "$TMP/spec.txt")" = "fc:10" ] || fail "--log = --model @FILE: the spec was written to"
expect_exit 2 -- "${LONG[@]}" --checkpoint "$TMP/rk" --keep 1 --log "$TMP/rk.1"
grep -q -- "--log and --checkpoint --keep name the same file '$TMP/rk.1'" "$TMP/err" || fail "--log = PATH.1: $(cat "$TMP/err")"
mkdir "$TMP/data"
cp "$DATA"/*.gz "$TMP/data/"
cp "$TMP/data/t10k-labels-idx1-ubyte.gz" "$TMP/labels.copy"
expect_exit 2 -- --data "$TMP/data" --gpus cpu:1 --train-samples 200 --epochs 100000 --no-progress --log "$TMP/data/t10k-labels-idx1-ubyte.gz"
cmp -s "$TMP/data/t10k-labels-idx1-ubyte.gz" "$TMP/labels.copy" || fail "--log in the data folder: a data file was written to"
grep -q -- "--log .* is a file in the data folder" "$TMP/err" || fail "--log = a data file: $(cat "$TMP/err")"

# 11: temporary files of dead processes are removed; a live process's is left alone
sh -c 'exit 0' &
dead=$!
wait $dead
touch "$TMP/ck.tmp.$dead" "$TMP/ck.tmp.$$"
expect_exit 0 -- "${ONE[@]}" --checkpoint "$TMP/ck"
[ -e "$TMP/ck.tmp.$dead" ] && fail "the temporary file of dead process $dead is still there"
[ -e "$TMP/ck.tmp.$$" ] || fail "the temporary file of a live process was removed"

# 12: a second run writing the same checkpoint is refused while the first runs
"$BIN" "${LONG[@]}" --checkpoint "$TMP/locked" --log "$TMP/locked.jsonl" >/dev/null 2>&1 &
first=$!
wait_for $HANG_S test -e "$TMP/locked.jsonl"
expect_error "$TMP/locked" "another running gputrain" -- "${LONG[@]}" --checkpoint "$TMP/locked"
kill -KILL $first
wait $first 2>/dev/null

finish
