#!/bin/bash
# Device call 5 (four GPUs): the GPU tests at 4 GPUs, and every mode at 1 and 4 GPUs (lenet5,
# default flags, 10 epochs, seeds 1-5) with the project's benchmark.
set -uo pipefail
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O; D=$R/.carry/fmnist
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
cmake -S $R -B $R/build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$R/.carry/stb -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build $R/build-cuda -j32 >/tmp/build.log 2>&1; echo "build rc=$? warnings=$(grep -c warning /tmp/build.log)"
GT_DATA=$D ctest --test-dir $R/build-cuda -R 'cuda' --output-on-failure >/tmp/gpu-tests.log 2>&1; echo "gpu tests: $(grep -E 'tests passed|tests failed' /tmp/gpu-tests.log)"
cp /tmp/gpu-tests.log $O/
B=/tmp/bench4
bash $R/tools/bench.sh --bin $R/build-cuda/gputrain --data $D --epochs 10 --seeds "1 2 3 4 5" --workers "1 4" --no-literal --no-torch --parallel --out $B >/tmp/bench.log 2>&1; echo "bench rc=$?"
tail -5 /tmp/bench.log
cd /tmp && tar czf $O/bench4.tgz bench4
sed -n '/^| mode/,/^$/p' $B/README.md
