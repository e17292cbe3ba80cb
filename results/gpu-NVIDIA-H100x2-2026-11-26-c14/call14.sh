#!/bin/bash
# GPU call 14 (2 GPUs): the merged store, layer-path and start-up work: GPU tests; the store modes
# and allreduce on cnn-wide and lenet5 at 1 and 2 GPUs (one run each, seed 1, one after another);
# cnn-wide on one GPU beside PyTorch's whole-step graph, FP32 and TF32; launch to exit.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c14
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu14/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built; B=build-cuda/gputrain
(cd build-cuda && GT_SOURCE_DIR=$R timeout 60 ./test_cuda_parity > $O/test_parity.txt 2>&1; echo "test_cuda_parity exit $?" >> $O/test_parity.txt); t "$(tail -1 $O/test_parity.txt)"; grep -iE "fail" $O/test_parity.txt | head -5
(cd build-cuda && GT_SOURCE_DIR=$R timeout 60 ./test_cuda_allreduce > $O/test_allreduce.txt 2>&1; echo "test_cuda_allreduce exit $?" >> $O/test_allreduce.txt); t "$(tail -1 $O/test_allreduce.txt)"; grep -E "check failed|rollback:|replica" $O/test_allreduce.txt | head -5
gl() { case $1 in 1) echo 0;; 2) echo 0,1;; esac; }
row() { # label model batch epochs W args...
  local l=$1 m=$2 b=$3 ep=$4 w=$5; shift 5
  local log=$O/run-$l-w$w.jsonl
  $B --data $D --gpus $(gl $w) --model $m --batch $b --epochs $ep --seed 1 --quiet --no-progress --log $log "$@" > $O/run-$l-w$w.txt 2>&1
  python3 - "$log" "$l x$w" <<'PY' >> $O/table.txt
import json,sys,statistics
L=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
ev=[e for e in L if e.get("type")=="eval"]; su=[e for e in L if e.get("type")=="summary"]
ends={}
for e in ev: ends[int(e.get("epoch",0))]=(e["wall_s"],e["samples"])
pw=ps=0; r=[]
for k in sorted(ends):
    w,s=ends[k]; r.append((s-ps)/(w-pw)); pw,ps=w,s
st=statistics.median(r[1:]) if len(r)>1 else (r[0] if r else 0)
a=su[-1].get('test_acc',0) if su else 0
print(f"{sys.argv[2]:30s} {st:12.0f} samples/s  acc {a:.4f}")
PY
}
for w in 1 2; do
  row cw-allreduce cnn-wide 128 3 $w --mode allreduce
  row cw-hogwild cnn-wide 128 3 $w
  row cw-sync cnn-wide 128 3 $w --mode sync
  row cw-ssp1 cnn-wide 128 3 $w --mode ssp --staleness 1
  row l5-hogwild lenet5 64 5 $w
  row l5-sync lenet5 64 5 $w --mode sync
  row l5-allreduce lenet5 64 5 $w --mode allreduce
done; t rows
GT_CONV_WGRAD=cudnn row cw-allreduce-wgrad=cudnn cnn-wide 128 3 1 --mode allreduce
row cw-allreduce-tf32 cnn-wide 128 3 1 --mode allreduce --tf32
for tf in 0 1; do python3 tools/torch_lenet.py --data $D --model cnn-wide --batch 128 --epochs 3 --graph 1 --tf32 $tf > $O/torch-cw-tf32-$tf.txt 2>&1
  echo "pytorch graph cnn-wide tf32=$tf $(grep '^{' $O/torch-cw-tf32-$tf.txt | tail -1 | sed 's/.*"samples_per_s_steady": \([0-9.]*\).*/\1/') samples/s" >> $O/table.txt; done; t torch
for i in 1 2 3; do /usr/bin/time -f "launch-to-exit %e s" $B --data $D --gpus 0 --epochs 10 --mode allreduce --quiet --no-progress >> $O/launch.txt 2>&1; done; t launch
cd $OUT && tar czf c14.tgz c14
head -3 $O/gpus.txt; cat $O/table.txt; grep -h "launch-to-exit\|done:" $O/launch.txt
