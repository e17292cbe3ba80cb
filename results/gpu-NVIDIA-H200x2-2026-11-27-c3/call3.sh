#!/bin/bash
# Device call 2 (two GPUs): the final tree against its base on the GPU, the GPU tests, the
# default command, new data on a GPU, start-up.
set -uo pipefail
R=$PWD; O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p $O $L; D=$R/.carry/fmnist
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee $L/gpus.txt
(cd /tmp && tar xzf $R/.carry/base.tgz)
bld() { cmake -S $1 -B $1/build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$R/.carry/stb -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build $1/build-cuda -j16 >$L/build-$2.log 2>&1; echo "build $2 rc=$? warnings=$(grep -c warning $L/build-$2.log)"; }
bld $R new & bld /tmp/base base & wait
N=$R/build-cuda/gputrain; B=/tmp/base/build-cuda/gputrain
GT_DATA=$D ctest --test-dir $R/build-cuda -R 'cuda|cli_startup' --output-on-failure >$L/gpu-tests.log 2>&1
echo "gpu tests: $(grep -E 'tests passed|tests failed' $L/gpu-tests.log)"; grep -E "Passed|Failed|Skipped" $L/gpu-tests.log
C="--data $D --epochs 1 --train-samples 12800 --seed 5 --log-steps --quiet --no-progress"
cmp2() { tag=$1; eb=$2; ab=$3; an=$4; env $eb $B $C $ab --log $L/b-$tag.jsonl >/dev/null 2>&1; $N $C $an --log $L/n-$tag.jsonl >/dev/null 2>&1; python3 $R/tools/steps_diff.py $L/b-$tag.jsonl $L/n-$tag.jsonl | sed "s|^|$tag: |; s|$L/||g"; }
for a in "--gpus 0" "--gpus 0 --mode allreduce" "--gpus 0 --mode allreduce --batch 700" "--gpus 0 --overlap" "--gpus 0 --mode ssp" "--gpus 0,1 --mode sync" "--gpus 0,1 --mode allreduce" "--gpus 0,1 --mode local"; do cmp2 "$(echo $a | tr -d ' -')" "" "$a" "$a"; done
cmp2 hogstore1 GT_STEP_PATH=store "--gpus 0" "--gpus 0 --store-step"
cmp2 cnnstore1 GT_STEP_PATH=store "--gpus 0 --model cnn-wide --batch 128" "--gpus 0 --model cnn-wide --batch 128 --store-step"
cmp2 syncstore2 GT_STEP_PATH=store "--gpus 0,1 --mode sync" "--gpus 0,1 --mode sync --store-step"
cmp2 arnccl2 GT_ALLREDUCE=nccl "--gpus 0,1 --mode allreduce" "--gpus 0,1 --mode allreduce --exchange nccl"
$B $C --gpus 0,1 --mode sync --log $L/b2.jsonl >/dev/null 2>&1; python3 $R/tools/steps_diff.py $L/b-gpus01modesync.jsonl $L/b2.jsonl | sed "s|^|base twice: |; s|$L/||g"
for s in 1 2 3; do for g in 0,1; do $N --data $D --gpus $g --seed $s --no-progress 2>&1 | grep '^done' | sed "s|^|default --gpus $g seed $s: |"; done; done
$N --data synthetic:3x32x32:10 --gpus 0 --model cnn-wide --batch 128 --epochs 2 --no-progress 2>&1 | grep -E "^done|^epoch"
$N --data synthetic:3x32x32:10 --gpus 0,1 --mode allreduce --model cnn-wide --batch 128 --epochs 2 --no-progress 2>&1 | grep -E "^done"
$N --data $D --gpus 0 --epochs 1 --model 'conv:8:3:1:2 relu gap fc:10' 2>&1 | tail -1
for b in $B $N; do $b --data $D --gpus cpu:1 --epochs 1 --train-samples 640 --no-progress 2>&1 | grep -o 'startup.*s)' | sed "s|^|cpu:1 $(basename $(dirname $(dirname $b))) |"; done
cd /tmp && tar czf $O/logs.tgz logs
