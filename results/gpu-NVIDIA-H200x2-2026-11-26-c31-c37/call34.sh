#!/bin/bash
# GPU call 34: the final code's GPU checks: compute-sanitizer memcheck over test_cuda_parity (the
# queued steps included), and the kill, fault and resume cases by hand on one worker's device
# step, allreduce on 2 GPUs and hogwild on 2 GPUs (.gpu34/cli_gpu.sh).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c34; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
bash .gpu34/cli_gpu.sh $R/build-cuda/gputrain $D > $O/cli_gpu.log 2>&1; t "cli_gpu exit $?"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd build-cuda && CUDA_VISIBLE_DEVICES=0 timeout 240 $SAN --tool memcheck --error-exitcode 9 ./test_cuda_parity > $O/memcheck-test_cuda_parity.log 2>&1); echo "memcheck rc $?" | tee -a $O/tests.txt
grep -m3 "Program hit\|Invalid" $O/memcheck-test_cuda_parity.log; tail -1 $O/memcheck-test_cuda_parity.log
t done
cd $OUT && tar czf c34.tgz c34
cat $O/cli_gpu.log
