#!/bin/bash
# GPU call 24: test_cuda_allreduce; compute-sanitizer on test_cuda_parity (the prediction kernel);
# cnn-wide b128 every mode at 2 GPUs, 5 epochs, seeds 1-3.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c24; export S
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu24/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 100 ./build-cuda/test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1; echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback" $O/test_cuda_allreduce.log | head -5
t tests
timeout 240 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers 2 --no-literal --no-torch --out $O/bench-cnn-wide > $O/bench-cnn-wide.log 2>&1; t "cnn-wide bench exit $?"
grep "^| " $O/bench-cnn-wide/README.md | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
CUDA_VISIBLE_DEVICES=0 timeout 200 $SAN --tool memcheck --error-exitcode 9 ./build-cuda/test_cuda_parity > $O/memcheck-test_cuda_parity.log 2>&1; echo "memcheck rc $?" | tee -a $O/tests.txt
tail -3 $O/memcheck-test_cuda_parity.log
t done
cd $OUT && tar czf c24.tgz c24
