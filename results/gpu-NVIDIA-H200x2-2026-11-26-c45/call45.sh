#!/bin/bash
# GPU call 45: what the mid-epoch evaluations cost allreduce's 2-GPU/1-GPU ratio: lenet5 b64,
# 5 epochs, seeds 1-3, at 1 and 2 GPUs, evaluating at epoch ends only (--eval-every 0) and 4
# times an epoch (tools/bench.sh's cadence); samples/s by tools/lib.sh's gt_median_sps.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c45; export S
mkdir -p $O; export NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 --target gputrain >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
. tools/lib.sh
for rep in 1 2; do for e in 0 4; do for w in 1 2; do
  gpus=0; [ $w = 2 ] && gpus=0,1
  every=0; [ $e = 4 ] && every=$(( 60000 / (64 * w) / 4 ))
  for s in 1 2 3; do
    f=$O/ar-w$w-e$e-s$s-r$rep.jsonl
    build-cuda/gputrain --data $D --gpus $gpus --mode allreduce --epochs 5 --seed $s --eval-every $every --log $f --quiet --no-progress > /dev/null 2>&1
    echo "rep $rep evals/epoch $e W $w seed $s: $(gt_median_sps $f)"
  done
done; done; done | tee $O/runs.txt
t runs
cd $OUT && tar czf c45.tgz c45
awk '{k=$2" "$4" "$6; sub(":","",$0); v[$4" "$6]+=$NF; n[$4" "$6]++} END {for (x in v) printf "evals/epoch W %s: mean %.0f\n", x, v[x]/n[x]}' $O/runs.txt | sort
