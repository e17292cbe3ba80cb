#!/bin/bash
# GPU call 31: the pipelined allreduce step. This commit (new) and its parent (base), same call:
# the GPU tests; tools/onegpu_check.sh with --baseline (cnn-wide b128 plain, lenet5 b64/b256,
# 10-epoch launch to exit x3, PyTorch's whole-step graph); allreduce 1 vs 2 GPUs, both builds.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c31; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
(cd .gpu31/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
BASE=$R/.gpu31/base/build/gputrain
t built
(cd build-cuda && timeout 120 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|exchange" $O/test_cuda_allreduce.log | head -8
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
t tests
export GT_COMMIT=$(cat .gpu31/commit)
timeout 300 tools/onegpu_check.sh --data $D --gpu 0 --skip-sanitizer --skip-parity --wall-runs 3 --baseline $BASE > $O/onegpu.log 2>&1; t "onegpu exit $?"
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo "$(cat .gpu31/commit)~1" || cat .gpu31/commit)
  timeout 60 tools/bench.sh --bin $bin --data $D --epochs 3 --seeds "1 2" --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-lenet5-$b > $O/ar-lenet5-$b.log 2>&1; t "lenet5 $b exit $?"
done
cd $OUT && tar czf c31.tgz c31
sed -n '/^== NVIDIA/,$p' $O/onegpu.log
for b in base new; do echo "$b"; grep -i "allreduce" $O/ar-lenet5-$b/README.md | head -6; done
