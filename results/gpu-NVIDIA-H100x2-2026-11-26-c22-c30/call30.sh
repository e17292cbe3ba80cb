#!/bin/bash
# GPU call 30: the GPU tests on the final code (sync in place, its guard at the barrier).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c30; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 100 ./build-cuda/test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1; echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|parity\|sync" $O/test_cuda_allreduce.log | head -8
timeout 80 ./build-cuda/test_cuda_parity > $O/test_cuda_parity.log 2>&1; echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -3
t done
