#!/bin/bash
# GPU call 39: this commit's GPU tests; lenet5, default flags, 10 epochs, seeds 1-10, every mode
# at 1 and 2 GPUs (tools/bench.sh, two runs); hogwild's step phases from the same logs.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c39; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu39/commit)
(cd build-cuda && timeout 170 ./test_cuda_allreduce > $O/test_cuda_allreduce.log 2>&1); echo "test_cuda_allreduce rc $?" | tee -a $O/tests.txt
grep -i "fail\|p2p sum and" $O/test_cuda_allreduce.log | head -8
t tests
timeout 170 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes "hogwild sync allreduce" --no-literal --no-torch --out $O/lenet5-a > $O/lenet5-a.log 2>&1; t "lenet5 a exit $?"
timeout 330 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes "hogwild-lockfree hogwild-overlap ssp-s2 ssp-s4 local-k4" --no-literal --no-torch --out $O/lenet5-b > $O/lenet5-b.log 2>&1; t "lenet5 b exit $?"
python3 tools/step_phases.py $O/lenet5-a/runs/*hogwild__w2__s1.jsonl $O/lenet5-a/runs/*hogwild__w2__s2.jsonl $O/lenet5-b/runs/*__w2__s1.jsonl > $O/phases.md 2>&1
cd $OUT && tar czf c39.tgz c39
for x in a b; do echo "lenet5-$x"; grep "^| " $O/lenet5-$x/README.md | grep -v "^| mode" | head -12; done
cat $O/phases.md
