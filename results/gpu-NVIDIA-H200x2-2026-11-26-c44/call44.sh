#!/bin/bash
# GPU call 44: the final code's GPU tests (local's rollback at its averages included) and the
# kill, fault, resume and guard cases of local on the device step by hand (cli_gpu_local.sh).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c44; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
(cd build-cuda && timeout 200 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|rollback\|local x" $O/test_cuda_allreduce.log | head -10
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
t tests
timeout 200 bash .gpu44/cli_gpu_local.sh $R/build-cuda/gputrain $D > $O/cli_gpu_local.log 2>&1; t "cli_gpu_local exit $?"
cd $OUT && tar czf c44.tgz c44
cat $O/tests.txt; cat $O/cli_gpu_local.log
