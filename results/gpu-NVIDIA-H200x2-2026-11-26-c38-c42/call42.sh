#!/bin/bash
# GPU call 42: local on several GPUs on the device step (this commit): the GPU tests; lenet5
# local-k4, default flags, 10 epochs, seeds 1-10, 1 and 2 GPUs; cnn-wide b128 local-k4, 5
# epochs, seeds 1-3, 2 GPUs, and GT_STEP_PATH=store beside it (seed 1).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c42; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu42/commit)
(cd build-cuda && timeout 200 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|p2p mean\| x[12]:" $O/test_cuda_allreduce.log | head -14
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
t tests
timeout 120 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes local-k4 --no-literal --no-torch --out $O/lenet5-local > $O/lenet5-local.log 2>&1; t "lenet5 local exit $?"
timeout 120 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers 2 --modes local-k4 --no-literal --no-torch --out $O/cnn-wide-local > $O/cnn-wide-local.log 2>&1; t "cnn-wide local exit $?"
GT_STEP_PATH=store timeout 100 $R/build-cuda/gputrain --data $D --model cnn-wide --batch 128 --gpus 0,1 --mode local --epochs 5 --seed 1 --no-progress > $O/cnn-wide-local-store.out 2>&1; t "cnn-wide local store exit $?"
$R/build-cuda/gputrain --data $D --gpus 0,1 --mode local --epochs 2 --seed 1 > $O/local-cli.out 2>&1; t "local cli exit $?"
cd $OUT && tar czf c42.tgz c42
cat $O/tests.txt
for x in lenet5-local cnn-wide-local; do echo $x; grep "^| " $O/$x/README.md | grep -v "^| mode" | head -4; done
tail -3 $O/cnn-wide-local-store.out; cat $O/local-cli.out | head -12
