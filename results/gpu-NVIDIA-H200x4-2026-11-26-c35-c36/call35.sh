#!/bin/bash
# GPU call 35 (4 GPUs): the GPU tests at 4 GPUs; lenet5 10 epochs, seeds 1-10, default flags, at 1
# and 4 GPUs: hogwild (the headline `--gpus 0,1,2,3`), sync (now allreduce's step), allreduce,
# then the other modes while time is left.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c35; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j64 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu35/commit)
(cd build-cuda && timeout 150 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|^rollback\|exchange\|replica\|warm-up\| x[14]:" $O/test_cuda_allreduce.log | head -12
t tests
timeout 170 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 4" --modes "hogwild sync allreduce" --no-literal --no-torch --out $O/lenet5-a > $O/lenet5-a.log 2>&1; t "lenet5 a exit $?"
timeout 200 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5" --workers "1 4" --modes "hogwild-lockfree hogwild-overlap ssp-s2 ssp-s4 local-k4" --no-literal --no-torch --out $O/lenet5-b > $O/lenet5-b.log 2>&1; t "lenet5 b exit $?"
cd $OUT && tar czf c35.tgz c35
for x in a b; do grep "^| " $O/lenet5-$x/README.md | grep -v "^| mode"; done
