#!/bin/bash
# GPU call 40: cnn-wide b128, default flags, 5 epochs, seeds 1-3, every mode at 2 GPUs (this
# commit); the fused peer sum and update against 2ac92ce (base), lenet5 allreduce b64 at 1 and 2
# GPUs, 5 epochs, seeds 1-3, base, new, base, new.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c40; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 --target gputrain >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
BASE=$R/.gpu38/base/build/gputrain
(cd .gpu38/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
t built
export GT_COMMIT=$(cat .gpu40/commit)
timeout 330 tools/bench.sh --parallel --data $D --bin $R/build-cuda/gputrain --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --workers 2 --no-literal --no-torch --out $O/cnn-wide > $O/cnn-wide.log 2>&1; t "cnn-wide exit $?"
for k in 1 2; do for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo 2ac92ce || cat .gpu40/commit)
  timeout 60 tools/bench.sh --bin $bin --data $D --epochs 5 --seeds "1 2 3" --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-lenet5-$b-$k > $O/ar-lenet5-$b-$k.log 2>&1; t "ar lenet5 $b $k exit $?"
done; done
python3 tools/step_phases.py $O/cnn-wide/runs/*hogwild*__s1.jsonl > $O/phases.md 2>&1
cd $OUT && tar czf c40.tgz c40
echo cnn-wide; grep "^| " $O/cnn-wide/README.md | grep -v "^| mode" | head -10
for k in 1 2; do for b in base new; do echo "ar lenet5 $b $k"; grep "^| " $O/ar-lenet5-$b-$k/README.md | grep -v "^| mode" | head -2; done; done
cat $O/phases.md
