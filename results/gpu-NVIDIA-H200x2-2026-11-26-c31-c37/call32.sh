#!/bin/bash
# GPU call 32: the pipelined allreduce step (with the evaluation's own result entry) and cuBLAS
# made by the layer path only. This commit (new) and 470faaa (base, before both), same call:
# the GPU tests; a start-up probe of the CUDA calls; tools/onegpu_check.sh with --baseline;
# allreduce 1 vs 2 GPUs (lenet5 b64 3 epochs, cnn-wide b128 3 epochs; lenet5 10 epochs 10 seeds).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c32; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
(cd .gpu32/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
BASE=$R/.gpu32/base/build/gputrain
gcc -O2 -o $O/probe .gpu32/probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lcublas -lcudnn && for i in 1 2; do $O/probe; done > $O/probe.txt 2>&1
t built
(cd build-cuda && timeout 120 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|exchange\|replica" $O/test_cuda_allreduce.log | head -8
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
t tests
export GT_COMMIT=$(cat .gpu32/commit)
timeout 200 tools/onegpu_check.sh --data $D --gpu 0 --skip-sanitizer --skip-parity --wall-runs 3 --baseline $BASE > $O/onegpu.log 2>&1; t "onegpu exit $?"
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo 470faaa || cat .gpu32/commit)
  timeout 40 tools/bench.sh --bin $bin --data $D --epochs 3 --seeds "1 2" --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-lenet5-$b > $O/ar-lenet5-$b.log 2>&1; t "lenet5 $b exit $?"
  timeout 60 tools/bench.sh --bin $bin --data $D --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-cnn-wide-$b > $O/ar-cnn-wide-$b.log 2>&1; t "cnn-wide $b exit $?"
done
for b in new base; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo 470faaa || cat .gpu32/commit)
  timeout 90 tools/bench.sh --parallel --bin $bin --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar10-lenet5-$b > $O/ar10-lenet5-$b.log 2>&1; t "lenet5 10 seeds $b exit $?"
done
cd $OUT && tar czf c32.tgz c32
cat $O/probe.txt
sed -n '/^== NVIDIA/,$p' $O/onegpu.log
for f in ar-lenet5 ar-cnn-wide ar10-lenet5; do for b in base new; do echo "$f $b"; grep -i "^| allreduce" $O/$f-$b/README.md | head -4; done; done
