#!/bin/bash
# GPU call 27: test_cuda_parity and its memcheck on this commit.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c27; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 100 ./build-cuda/test_cuda_parity > $O/test_cuda_parity.log 2>&1; echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail\|predicted" $O/test_cuda_parity.log | head -5; tail -1 $O/test_cuda_parity.log
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
CUDA_VISIBLE_DEVICES=0 timeout 150 $SAN --tool memcheck --error-exitcode 9 ./build-cuda/test_cuda_parity > $O/memcheck-test_cuda_parity.log 2>&1; echo "memcheck rc $?" | tee -a $O/tests.txt
grep -m3 "Program hit\|Invalid" $O/memcheck-test_cuda_parity.log; tail -1 $O/memcheck-test_cuda_parity.log
t done
