#!/bin/bash
# Device call 1 (one GPU): the refactored tree against its base on the GPU.
set -uo pipefail
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O; D=$R/.carry/fmnist
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | tee $O/gpus.txt
(cd /tmp && tar xzf $R/.carry/base.tgz)
bld() { cmake -S $1 -B $1/build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$R/.carry/stb -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build $1/build-cuda -j16 >$O/build-$2.log 2>&1; echo "build $2 rc=$?"; }
bld $R new & bld /tmp/base base & wait
N=$R/build-cuda/gputrain; B=/tmp/base/build-cuda/gputrain
GT_DATA=$D ctest --test-dir $R/build-cuda -R 'cuda|cli_startup' --output-on-failure >$O/gpu-tests.log 2>&1; echo "gpu tests: $(grep -E 'tests passed|tests failed' $O/gpu-tests.log)"
C="--data $D --epochs 1 --train-samples 12800 --seed 5 --log-steps --quiet --no-progress"
cmp() { tag=$1; shift; $B $C "$@" --log $O/b-$tag.jsonl; $N $C "$@" --log $O/n-$tag.jsonl; python3 $R/tools/steps_diff.py $O/b-$tag.jsonl $O/n-$tag.jsonl | sed "s/^/$tag: /"; }
wall() { local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N); echo "wall $(( (t1 - t0) / 1000000 )) ms" >&2; }
cmp hog --gpus 0
cmp ar --gpus 0 --mode allreduce
cmp sync --gpus 0 --mode sync
cmp ovl --gpus 0 --overlap
cmp ssp --gpus 0 --mode ssp
export GT_STEP_PATH=store
cmp hogstore --gpus 0
cmp cnn --gpus 0 --model cnn-wide --batch 128
unset GT_STEP_PATH
$B $C --gpus 0 --log $O/b2-hog.jsonl; python3 $R/tools/steps_diff.py $O/b-hog.jsonl $O/b2-hog.jsonl | sed 's/^/base twice: /'
cat > /tmp/bare.cu <<'C'
#include <cuda_runtime.h>
#include <stdio.h>
int main(void){int n=0;cudaGetDeviceCount(&n);cudaFree(0);printf("%d\n",n);return 0;}
C
nvcc -o /tmp/bare /tmp/bare.cu
for i in 1 2 3 4 5; do wall /tmp/bare 2>&1 >/dev/null | sed 's/^/bare cudaFree(0): /'; done | tee $O/startup.txt
for i in 1 2 3; do for b in $B $N; do t0=$(date +%s%N); $b --data $D --gpus 0 --epochs 10 --no-progress >/tmp/o.txt 2>&1; t1=$(date +%s%N); echo "$(basename $(dirname $(dirname $b))) 10 epochs: wall $(( (t1 - t0) / 1000000 )) ms, $(grep -o 'startup[^)]*)' /tmp/o.txt), acc $(grep -o 'test acc [0-9.]*' /tmp/o.txt | tail -1)"; done; done | tee -a $O/startup.txt
for b in $B $N; do $b --data $D --gpus cpu:1 --epochs 1 --train-samples 640 --no-progress 2>&1 | grep -o 'startup.*s)' | sed "s|^|cpu:1 $(basename $(dirname $(dirname $b))) |"; done | tee -a $O/startup.txt
$N --data $D --epochs 2 --no-progress 2>&1 | tail -4
