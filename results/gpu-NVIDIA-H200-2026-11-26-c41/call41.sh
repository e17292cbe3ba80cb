#!/bin/bash
# GPU call 41, a one-GPU host: tools/onegpu_check.sh of this commit with 2ac92ce as its baseline
# (lenet5 b64/b256 and cnn-wide b128 FP32/TF32 against PyTorch's whole-step CUDA graph, and the
# 10-epoch launch to exit, 5 runs each); this commit's test_cuda_parity.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c41; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt; lscpu | grep -i "model name" >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j16 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
BASE=$R/.gpu38/base/build/gputrain
(cd .gpu38/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j16 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu41/commit)
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
t tests
timeout 330 tools/onegpu_check.sh --data $D --gpu 0 --skip-sanitizer --skip-parity --wall-runs 5 --baseline $BASE > $O/onegpu.log 2>&1; t "onegpu exit $?"
cd $OUT && tar czf c41.tgz c41
sed -n '/^== NVIDIA/,$p' $O/onegpu.log | grep -v "data load beside"
