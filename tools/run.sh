#!/usr/bin/env bash
# run.sh - the main job: install what is missing, build, and train LeNet-5 on Fashion-MNIST on
# every GPU (or on the CPU where there is none). Extra arguments go to gputrain, so
# `tools/run.sh --help` prints gputrain's options (after the build). The build's own output goes
# to build/build.log; a failed build prints its last lines.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
gt_install_deps
mkdir -p build
echo "gputrain: building build/gputrain (a minute or two the first time; log in build/build.log)..." >&2
if ! { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j"$(nproc)" --target gputrain; } >build/build.log 2>&1; then
    tail -n 20 build/build.log >&2
    echo "gputrain: the build failed (the whole log: build/build.log)" >&2
    exit 1
fi
exec ./build/gputrain "$@"
