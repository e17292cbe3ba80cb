#!/bin/bash
# GPU call 37: the final code's GPU tests (the device step of every mode with one worker), and
# ssp and local at one GPU (now the device step), lenet5 and cnn-wide, beside GT_STEP_PATH=store.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c37; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j64 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu37/commit)
(cd build-cuda && timeout 150 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|warm-up\| x[124]:" $O/test_cuda_allreduce.log | head -12
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
t tests
for p in auto store; do
  GT_STEP_PATH=$p timeout 60 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 3 --seeds "1 2" --workers 1 --modes "ssp-s2 local-k4" --no-literal --no-torch --out $O/lenet5-$p > $O/lenet5-$p.log 2>&1; t "lenet5 $p exit $?"
  GT_STEP_PATH=$p timeout 60 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers 1 --modes "ssp-s2 local-k4" --no-literal --no-torch --out $O/cnn-wide-$p > $O/cnn-wide-$p.log 2>&1; t "cnn-wide $p exit $?"
done
cd $OUT && tar czf c37.tgz c37
for p in auto store; do for x in lenet5 cnn-wide; do echo "$x GT_STEP_PATH=$p"; grep "^| " $O/$x-$p/README.md | grep -v "^| mode"; done; done
