#!/bin/bash
# GPU call 43: the final commit's GPU tests on every GPU of the host; local on the device step at
# 1 and all GPUs (lenet5 default flags, 10 epochs, seeds 1-10; cnn-wide b128, 5 epochs, seeds 1-3).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c43; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
G=$(nvidia-smi -L | wc -l)
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j64 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t "built ($G GPUs)"
export GT_COMMIT=$(cat .gpu43/commit)
(cd build-cuda && timeout 200 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|p2p mean\|p2p sum and\|local x" $O/test_cuda_allreduce.log | head -10
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
t tests
timeout 150 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 $G" --modes "local-k4" --no-literal --no-torch --out $O/lenet5-local > $O/lenet5-local.log 2>&1; t "lenet5 local exit $?"
timeout 100 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers "1 $G" --modes local-k4 --no-literal --no-torch --out $O/cnn-wide-local > $O/cnn-wide-local.log 2>&1; t "cnn-wide local exit $?"
cd $OUT && tar czf c43.tgz c43
cat $O/tests.txt
for x in lenet5-local cnn-wide-local; do echo $x; grep "^| " $O/$x/README.md | grep -v "^| mode" | head -4; done
