#!/bin/bash
# GPU call 28: sync computing on the store in place. This commit and its parent (base), same call:
# lenet5 sync at 1 and 2 GPUs, 10 epochs, seeds 1-10 (same math: the same accuracies expected);
# cnn-wide b128 sync at 1 and 2 GPUs, 3 epochs, seeds 1-2.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c28; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 --target gputrain >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
(cd .gpu28/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
t built
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$R/.gpu28/base/build/gputrain
  export GT_COMMIT=$([ $b = base ] && echo "$(cat .gpu28/commit)~1" || cat .gpu28/commit)
  timeout 100 tools/bench.sh --parallel --bin $bin --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes sync --no-literal --no-torch --out $O/sync-lenet5-$b > $O/sync-lenet5-$b.log 2>&1; t "lenet5 $b exit $?"
  timeout 80 tools/bench.sh --bin $bin --data $D --model cnn-wide --batch 128 --epochs 3 --seeds "1 2" --workers "1 2" --modes sync --no-literal --no-torch --out $O/sync-cnn-wide-$b > $O/sync-cnn-wide-$b.log 2>&1; t "cnn-wide $b exit $?"
done
cd $OUT && tar czf c28.tgz c28
for b in base new; do echo $b; grep "^| sync" $O/sync-lenet5-$b/README.md; grep "^| sync" $O/sync-cnn-wide-$b/README.md; done
paste <(cut -d, -f1,16 $O/sync-lenet5-base/runs.csv | sort) <(cut -d, -f1,16 $O/sync-lenet5-new/runs.csv | sort) | awk -F'[,\t]' '$2!=$4{d++} END{print "runs whose final accuracy differs between the builds:", d+0}'
