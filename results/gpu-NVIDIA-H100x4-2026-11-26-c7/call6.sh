#!/bin/bash
# GPU call 6: lenet5 matrix, default recipe, 10 seeds, 1/2/4 GPUs, PyTorch single + DDP beside it.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c6
mkdir -p $O; export NCCL_NVLS_ENABLE=0 GT_DATA=$D GT_COMMIT=$(cat .gpu6/commit)
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; }
B=$R/build-cuda/gputrain; t built
for i in 1 2 3; do /usr/bin/time -f "launch-to-exit %e s" $B --data $D --gpus 0 --epochs 10 --quiet >> $O/launch.txt 2>&1; done; t launch
timeout 490 bash tools/bench.sh --parallel --bin $B --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --no-literal --torch-seeds "1 2" --out $O/bench-lenet5 > $O/bench.log 2>&1; t "bench $?"
[ -f $O/bench-lenet5/README.md ] || timeout 30 bash tools/bench.sh --replot --out $O/bench-lenet5 >> $O/bench.log 2>&1
cd $OUT && tar czf c6.tgz c6
cat $O/launch.txt; grep -E '^\| ' $O/bench-lenet5/README.md 2>/dev/null | cut -c1-250 | head -30; grep -E 'FAILED' $O/bench.log | head; tail -3 $O/bench.log
