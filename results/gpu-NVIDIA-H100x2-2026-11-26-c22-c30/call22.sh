#!/bin/bash
# GPU call 22: --overlap's weight prediction. GPU tests; lenet5 hogwild and --overlap at 1 and 2
# GPUs, 10 epochs, seeds 1-10; cnn-wide --overlap at 1 and 2 GPUs, 5 epochs, seeds 1-3.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c22; export S
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu22/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 150 ./build-cuda/test_cuda_parity > $O/test_cuda_parity.log 2>&1; echo "parity rc $?" | tee -a $O/tests.txt
grep -i "predict\|fail" $O/test_cuda_parity.log | head -8
t parity
timeout 200 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes "hogwild hogwild-overlap" --no-literal --no-torch --out $O/bench-lenet5 > $O/bench-lenet5.log 2>&1; t "lenet5 bench exit $?"
timeout 120 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers "1 2" --modes "hogwild-overlap" --no-literal --no-torch --out $O/bench-cnn-wide > $O/bench-cnn-wide.log 2>&1; t "cnn-wide bench exit $?"
cd $OUT && tar czf c22.tgz c22
grep "^| " $O/bench-lenet5/README.md | head -8; grep "^| " $O/bench-cnn-wide/README.md | head -6
