#!/bin/bash
# GPU call 23: GPU tests on this commit; lenet5 every mode at 1 and 2 GPUs, 10 epochs, seeds 1-10;
# --overlap at 2 GPUs with momentum 0.5 and 0.57 against the rule's 0.4.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c23; export S
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu23/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 100 ./build-cuda/test_cuda_parity > $O/test_cuda_parity.log 2>&1; echo "test_cuda_parity rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_parity.log | head -5
timeout 150 ./build-cuda/test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1; echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail" $O/test_cuda_allreduce.log | head -5
t tests
timeout 290 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --no-literal --no-torch --out $O/bench-lenet5 > $O/bench-lenet5.log 2>&1; t "lenet5 bench exit $?"
for m in 0.5 0.57; do timeout 40 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers 2 --modes hogwild-overlap --momentum $m --no-literal --no-torch --out $O/overlap-m$m > $O/overlap-m$m.log 2>&1; t "overlap m$m exit $?"; done
cd $OUT && tar czf c23.tgz c23
grep "^| " $O/bench-lenet5/README.md | head -20; for m in 0.5 0.57; do grep "^| hog" $O/overlap-m$m/README.md; done
