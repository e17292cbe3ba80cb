# lib.sh - shell helpers shared by the measurement scripts in tools/ (sourced, not run).

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

# Checks the gputrain and gt_plot binaries (variables bin and plot; plot defaults to gt_plot beside
# bin) and finds the Fashion-MNIST folder (variable data; default datasets/fashion-mnist, then
# /usr/share/datasets/fashion-mnist), made absolute. Calls die MESSAGE on a problem.
gt_resolve_inputs() {
    [ -x "$bin" ] || die "--bin: '$bin' is not an executable (build it: cmake --build build --target gputrain)"
    plot=${plot:-$(dirname "$bin")/gt_plot}
    [ -x "$plot" ] || die "--plot: '$plot' is not an executable (build it: cmake --build build --target gt_plot)"
    if [ -z "$data" ]; then
        for d in "$root/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist; do
            if [ -f "$d/train-labels-idx1-ubyte.gz" ]; then data=$d; break; fi
        done
        [ -n "$data" ] || die "--data: no Fashion-MNIST found in datasets/fashion-mnist or /usr/share/datasets/fashion-mnist"
    fi
    [ -f "$data/train-labels-idx1-ubyte.gz" ] || die "--data: '$data/train-labels-idx1-ubyte.gz' not found"
    data=$(cd "$data" && pwd)
}
