#!/bin/bash
# GPU call 36 (4 GPUs): the final code's GPU tests at 4 GPUs (test_cuda_allreduce, test_cuda_parity);
# sync (now allreduce's step on GPUs) and allreduce at 1 and 2 GPUs: lenet5 10 epochs x 10 seeds,
# cnn-wide b128 3 epochs seed 1.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c36; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j64 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu36/commit)
(cd build-cuda && timeout 150 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|warm-up\| x[124]:" $O/test_cuda_allreduce.log | head -12
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
t tests
timeout 120 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes "sync allreduce" --no-literal --no-torch --out $O/lenet5 > $O/lenet5.log 2>&1; t "lenet5 exit $?"
timeout 90 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers "1 2" --modes "sync allreduce" --no-literal --no-torch --out $O/cnn-wide > $O/cnn-wide.log 2>&1; t "cnn-wide exit $?"
cd $OUT && tar czf c36.tgz c36
for x in lenet5 cnn-wide; do grep "^| " $O/$x/README.md | grep -v "^| mode"; done
