# lib.sh - shell helpers shared by the scripts in tools/ (sourced, not run). A script sets gt_prog
# (its name in messages) before it calls them.

# A failure while running: one line on stderr, exit status 1.
die() { echo "${gt_prog:-gputrain-tools}: $*" >&2; exit 1; }
# A command-line error: one line on stderr, exit status 2.
usage_error() { echo "${gt_prog:-gputrain-tools}: $* (see --help)" >&2; exit 2; }
note() { echo "${gt_prog:-gputrain-tools}: $*"; }
# need_value FLAG $# : the flag has a value after it.
need_value() { [ "$2" -ge 2 ] || usage_error "$1 needs a value"; }
# check_uint FLAG VALUE : a whole number >= 1.
check_uint() {
    case "$2" in '' | *[!0-9]*) usage_error "$1: bad count '$2'" ;; esac
    [ "$2" -ge 1 ] || usage_error "$1: must be >= 1, not '$2'"
}
# check_number FLAG VALUE : a non-negative decimal number.
check_number() { awk -v v="$2" 'BEGIN { exit !(v ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/) }' || usage_error "$1: bad number '$2'"; }
# gt_usage SCRIPT : prints the comment block at the top of SCRIPT (its --help).
gt_usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"; }

# The charts: tools/plot.py (matplotlib) and tools/jsonl2csv.py, run by the python3 on PATH.
gt_plot() { python3 "$(dirname "${BASH_SOURCE[0]}")/plot.py" "$@"; }
gt_jsonl2csv() { python3 "$(dirname "${BASH_SOURCE[0]}")/jsonl2csv.py" "$@"; }
gt_need_matplotlib() {
    python3 -c 'import matplotlib' >/dev/null 2>&1 ||
        die "python3 cannot import matplotlib (install it: python3 -m pip install matplotlib, or run tools/deps.sh)"
}

# Median epoch time after the first, from the evaluation wall clock of a gputrain JSONL log
# (evaluations at epoch ends; the first epoch includes start-up and is left out).
gt_median_epoch() {
    grep '"type":"eval"' "$1" | sed 's/.*"wall_s":\([0-9.]*\).*/\1/' |
        awk 'NR > 1 { print $1 - prev } { prev = $1 } END { if (NR == 1) print prev }' | sort -g |
        awk '{ d[NR] = $1 } END { print (NR % 2) ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2 }'
}

# Samples/s of a gputrain JSONL log: an epoch's samples (the first evaluation's count) over
# gt_median_epoch.
gt_median_sps() {
    local n med
    n=$(grep '"type":"eval"' "$1" | head -1 | sed 's/.*"samples":\([0-9]*\).*/\1/')
    med=$(gt_median_epoch "$1")
    awk -v n="$n" -v m="$med" 'BEGIN { printf "%.0f", n / m }'
}

# Checks the gputrain binary (variable bin) and matplotlib, and finds the Fashion-MNIST folder
# (variable data; default datasets/fashion-mnist, then /usr/share/datasets/fashion-mnist), made
# absolute. Calls die MESSAGE on a problem.
gt_resolve_inputs() {
    [ -x "$bin" ] || die "--bin: '$bin' is not an executable (build it: cmake --build build --target gputrain)"
    gt_need_matplotlib
    gt_find_data
}

# Finds the Fashion-MNIST folder (variable data; default datasets/fashion-mnist beside tools/, then
# /usr/share/datasets/fashion-mnist) and makes it absolute; a bad --data is a command-line error.
gt_find_data() {
    local root_dir d
    root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    if [ -z "$data" ]; then
        for d in "$root_dir/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist; do
            if [ -f "$d/train-labels-idx1-ubyte.gz" ]; then data=$d; break; fi
        done
        [ -n "$data" ] || usage_error "--data: no Fashion-MNIST found in datasets/fashion-mnist or /usr/share/datasets/fashion-mnist"
    fi
    [ -f "$data/train-labels-idx1-ubyte.gz" ] || usage_error "--data: '$data/train-labels-idx1-ubyte.gz' not found"
    data=$(cd "$data" && pwd)
}

# gt_card_meta GPU: sets card (the GPU's name), tag (the name as a file-name part), date (UTC) and
# commit (GT_COMMIT, else the checkout's short hash, with -dirty where tracked files differ from
# it, else "unknown") for a results file.
gt_card_meta() {
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$1" | head -1)
    tag=$(echo "$card" | tr ' ' '-' | tr -cd 'A-Za-z0-9._-')
    date=$(date -u +%Y-%m-%d)
    commit=${GT_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
    if [ -z "${GT_COMMIT:-}" ] && [ "$commit" != unknown ] && ! git -C "$root" diff --quiet HEAD -- 2>/dev/null; then
        commit=$commit-dirty
    fi
}

# gt_command_line "$0" "$@": sets command_line, the command as typed (shell-quoted).
gt_command_line() {
    command_line=$(printf '%q ' "$@")
    command_line=${command_line% }
}
