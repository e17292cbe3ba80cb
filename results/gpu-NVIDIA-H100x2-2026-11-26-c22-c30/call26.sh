#!/bin/bash
# GPU call 26: the fused zero-copy prediction. Build this tree and the previous commit (base);
# test_cuda_parity and its memcheck; lenet5 --overlap at 1 and 2 GPUs, 10 epochs, seeds 1-10, both builds.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c26; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
(cd .gpu26/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; }
t built
timeout 100 ./build-cuda/test_cuda_parity > $O/test_cuda_parity.log 2>&1; echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
CUDA_VISIBLE_DEVICES=0 timeout 120 $SAN --tool memcheck --error-exitcode 9 ./build-cuda/test_cuda_parity > $O/memcheck-test_cuda_parity.log 2>&1; echo "memcheck rc $?" | tee -a $O/tests.txt
tail -2 $O/memcheck-test_cuda_parity.log
t tests
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$R/.gpu26/base/build/gputrain
  GT_COMMIT=$([ $b = base ] && echo "$(cat .gpu26/commit)~1" || cat .gpu26/commit) timeout 70 tools/bench.sh --parallel --bin $bin --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes hogwild-overlap --no-literal --no-torch --out $O/overlap-$b > $O/overlap-$b.log 2>&1; t "overlap $b exit $?"
done
cd $OUT && tar czf c26.tgz c26
for b in base new; do echo $b; grep "^| hog" $O/overlap-$b/README.md; done
