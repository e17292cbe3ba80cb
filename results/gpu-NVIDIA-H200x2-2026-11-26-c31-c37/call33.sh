#!/bin/bash
# GPU call 33: one worker's hogwild and sync steps on the GPU (the allreduce step, store brought up
# to date where read), allreduce's warm-up from the update number, the pipelined step. This
# commit (new) and 470faaa (base, the session's start), same call: the GPU tests;
# tools/onegpu_check.sh with --baseline; lenet5 hogwild, sync, allreduce at 1 and 2 GPUs, 10
# epochs, 10 seeds (new); cnn-wide b128 hogwild and sync at 1 GPU, both builds.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c33; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
BASE=$R/.gpu33/base/build/gputrain
(cd .gpu33/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
t built
(cd build-cuda && timeout 150 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|exchange\|replica\|warm-up\| x1:" $O/test_cuda_allreduce.log | head -12
(cd build-cuda && timeout 100 ./test_cuda_parity > $O/test_cuda_parity.log 2>&1); echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
t tests
export GT_COMMIT=$(cat .gpu33/commit)
timeout 200 tools/onegpu_check.sh --data $D --gpu 0 --skip-sanitizer --skip-parity --wall-runs 3 --baseline $BASE > $O/onegpu.log 2>&1; t "onegpu exit $?"
timeout 150 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes "hogwild sync allreduce" --no-literal --no-torch --out $O/lenet5-new > $O/lenet5-new.log 2>&1; t "lenet5 10 seeds exit $?"
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo 470faaa || cat .gpu33/commit)
  timeout 70 tools/bench.sh --bin $bin --data $D --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers 1 --modes "hogwild sync allreduce" --no-literal --no-torch --out $O/cnn-wide-$b > $O/cnn-wide-$b.log 2>&1; t "cnn-wide $b exit $?"
done
cd $OUT && tar czf c33.tgz c33
sed -n '/^== NVIDIA/,$p' $O/onegpu.log | grep -v "data load beside"
echo lenet5-new; grep "^| " $O/lenet5-new/README.md | grep -v "^| mode" | head -8
for b in base new; do echo "cnn-wide $b"; grep "^| " $O/cnn-wide-$b/README.md | grep -v "^| mode" | head -4; done
