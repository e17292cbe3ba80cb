#!/usr/bin/env bash
# cli_conv_cache.sh - --conv-cache on a GPU: a first run times its convolutions and keeps the
# choices in the file; a second run takes every one from it (it times none) and trains to the same
# losses bit for bit (the same algorithms run); off times them again and leaves the file alone;
# the default file lives under $XDG_CACHE_HOME; a file that is not a cache, and a folder that does
# not exist, are refused in one line naming them. The unit test test_conv_cache covers the file's
# format without a GPU. Skipped without one.
. "$(dirname "$0")/lib_cli.sh"
if ! "$BIN" --version | grep -qw cuda || [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 1 ]; then
    echo "skipped: needs a CUDA build and a GPU"
    exit 77
fi
RUN=(--data synthetic:3x32x32:10:1024 --model resnet20 --precision bf16 --gpus 0 --seed 3
     --no-progress)
num() { grep "\"type\":\"summary\"" "$1" | sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p"; }
losses() { grep '"type":"eval"' "$1" | sed 's/.*"train_loss":\([0-9.e+-]*\).*"test_loss":\([0-9.e+-]*\).*/\1 \2/'; }
CC=$TMP/cc

# ---- the first run times and keeps; the second takes ----------------------------------------------
expect_exit 0 -- "${RUN[@]}" --epochs 2 --conv-cache "$CC" --log "$TMP/a.jsonl"
[ "$(num "$TMP/a.jsonl" conv_searches)" -gt 0 ] 2>/dev/null || fail "first run: conv_searches $(num "$TMP/a.jsonl" conv_searches)"
[ "$(num "$TMP/a.jsonl" conv_from_file)" = 0 ] || fail "first run: conv_from_file $(num "$TMP/a.jsonl" conv_from_file)"
[ "$(head -1 "$CC" 2>/dev/null)" = "gputrain conv-cache 1" ] || fail "no cache file at $CC after the first run"
kept=$(($(wc -l <"$CC") - 1))
expect_exit 0 -- "${RUN[@]}" --epochs 2 --conv-cache "$CC" --log "$TMP/b.jsonl"
[ "$(num "$TMP/b.jsonl" conv_searches)" = 0 ] || fail "second run timed $(num "$TMP/b.jsonl" conv_searches) choices"
[ "$(num "$TMP/b.jsonl" conv_from_file)" -gt 0 ] 2>/dev/null || fail "second run: conv_from_file $(num "$TMP/b.jsonl" conv_from_file)"
[ "$(($(wc -l <"$CC") - 1))" = "$kept" ] || fail "the second run changed the file's $kept choices"
[ -n "$(losses "$TMP/a.jsonl")" ] && [ "$(losses "$TMP/a.jsonl")" = "$(losses "$TMP/b.jsonl")" ] ||
    fail "the runs' losses differ: $(losses "$TMP/a.jsonl" | tr '\n' ' ') / $(losses "$TMP/b.jsonl" | tr '\n' ' ')"

# ---- off: timed again, the file untouched -----------------------------------------------------------
sum=$(md5sum <"$CC")
expect_exit 0 -- "${RUN[@]}" --epochs 1 --conv-cache off --log "$TMP/c.jsonl"
[ "$(num "$TMP/c.jsonl" conv_searches)" -gt 0 ] 2>/dev/null && [ "$(num "$TMP/c.jsonl" conv_from_file)" = 0 ] ||
    fail "--conv-cache off: conv_searches $(num "$TMP/c.jsonl" conv_searches), conv_from_file $(num "$TMP/c.jsonl" conv_from_file)"
[ "$(md5sum <"$CC")" = "$sum" ] || fail "--conv-cache off changed the file"

# ---- the default file -------------------------------------------------------------------------------
XDG_CACHE_HOME=$TMP/xdg expect_exit 0 -- "${RUN[@]}" --epochs 1
[ "$(head -1 "$TMP/xdg/gputrain/conv-cache" 2>/dev/null)" = "gputrain conv-cache 1" ] ||
    fail "no default cache file under XDG_CACHE_HOME: $(ls -R "$TMP/xdg" 2>&1 | tr '\n' ' ')"

# ---- refused ------------------------------------------------------------------------------------------
echo "my notes" >"$TMP/notes.txt"
expect_error "--conv-cache" "$TMP/notes.txt" "refusing" -- "${RUN[@]}" --epochs 1 --conv-cache "$TMP/notes.txt"
[ "$(cat "$TMP/notes.txt")" = "my notes" ] || fail "the notes were overwritten"
expect_error "--conv-cache" "$TMP/none" "does not exist" -- "${RUN[@]}" --epochs 1 --conv-cache "$TMP/none/cc"
finish
