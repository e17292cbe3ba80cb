#!/usr/bin/env bash
# run.sh - the main job: install what is missing, build, and train LeNet-5 on Fashion-MNIST on
# every GPU (or on the CPU where there is none). Extra arguments go to gputrain, so
# `tools/run.sh --help` prints gputrain's options (after the build).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
gt_install_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target gputrain >/dev/null
exec ./build/gputrain "$@"
