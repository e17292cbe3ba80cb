#!/bin/bash
# GPU call 46: ssp s=1, cnn-wide b128, default flags, 3 epochs, seed 1, at 1 and 2 GPUs (one GPU
# takes the device step; GT_STEP_PATH=store beside it for the store's own one-GPU rate).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c46; export S
mkdir -p $O; export NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 --target gputrain >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu46/commit)
timeout 100 tools/bench.sh --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers "1 2" --modes ssp-s1 --no-literal --no-torch --out $O/ssp1 > $O/ssp1.log 2>&1; t "ssp1 exit $?"
GT_STEP_PATH=store timeout 100 tools/bench.sh --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers 1 --modes ssp-s1 --no-literal --no-torch --out $O/ssp1-store > $O/ssp1-store.log 2>&1; t "ssp1 store exit $?"
cd $OUT && tar czf c46.tgz c46
for x in ssp1 ssp1-store; do echo $x; grep "^| " $O/$x/README.md | grep -v "^| mode"; done
