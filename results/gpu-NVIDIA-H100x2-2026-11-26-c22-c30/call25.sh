#!/bin/bash
# GPU call 25 (experiment, uncommitted tree on top of .gpu25/commit): --overlap pulls late.
# GT_OVERLAP_LATE=f: the pull of the next step waits until f x the step time after the last step ended.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c25; export S
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu25/commit)+late GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
for f in 0 0.4 0.6 0.8; do
  GT_OVERLAP_LATE=$f timeout 60 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --workers "1 2" --modes hogwild-overlap --no-literal --no-torch --out $O/lenet5-late$f > $O/lenet5-late$f.log 2>&1; t "lenet5 late $f exit $?"
done
for f in 0.6 0.8; do
  GT_OVERLAP_LATE=$f timeout 70 tools/bench.sh --parallel --bin $R/build-cuda/gputrain --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers 2 --modes hogwild-overlap --no-literal --no-torch --out $O/cnn-wide-late$f > $O/cnn-wide-late$f.log 2>&1; t "cnn-wide late $f exit $?"
done
cd $OUT && tar czf c25.tgz c25
for f in 0 0.4 0.6 0.8; do echo "late $f"; grep "^| hog" $O/lenet5-late$f/README.md; done
for f in 0.6 0.8; do echo "cnn-wide late $f"; grep "^| hog" $O/cnn-wide-late$f/README.md; done
