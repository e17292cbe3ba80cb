#!/bin/bash
# GPU call 13 (4 GPUs): allreduce evaluating on its replicas: GPU tests, the cost of 4 evaluations an
# epoch against epoch ends only, the cnn-wide allreduce benchmark at 1, 2, 4 GPUs.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c13
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu13/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built; B=build-cuda/gputrain
gl() { case $1 in 1) echo 0;; 2) echo 0,1;; 4) echo 0,1,2,3;; esac; }
row() { # model batch epochs mode W evals/epoch
  local m=$1 b=$2 ep=$3 mode=$4 w=$5 k=$6 ev=0 a=(--mode $4)
  [ $mode = overlap ] && a=(--mode hogwild --overlap)
  [ $k -gt 0 ] && ev=$((60000 / (b * w * k)))
  local log=$O/$m-$mode-w$w-e$k.jsonl
  $B --data $D --gpus $(gl $w) --model $m --batch $b --epochs $ep --seed 1 --quiet --no-progress --eval-every $ev "${a[@]}" --log $log > /dev/null 2>&1
  python3 - "$log" "$m $mode x$w evals/epoch $k" <<'PY' >> $O/table.txt
import json,sys,statistics
ev=[json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l or '"type": "eval"' in l]
su=[json.loads(l) for l in open(sys.argv[1]) if '"type":"summary"' in l]
ends={}
for e in ev: ends[int(e.get("epoch",0))]=(e["wall_s"],e["samples"])
pw=ps=0; r=[]
for k in sorted(ends):
    w,s=ends[k]; r.append((s-ps)/(w-pw)); pw,ps=w,s
st=statistics.median(r[1:]) if len(r)>1 else (r[0] if r else 0)
print(f"{sys.argv[2]:40s} steady {st:12.0f}  run {su[-1]['samples_per_s'] if su else 0:12.0f}  acc {su[-1].get('test_acc',0) if su else 0:.4f}")
PY
}
(cd build-cuda && GT_SOURCE_DIR=$R timeout 150 ./test_cuda_allreduce > $O/test_allreduce.txt 2>&1; echo "test_cuda_allreduce exit $?" >> $O/test_allreduce.txt)
t "$(tail -1 $O/test_allreduce.txt)"; grep -E "rollback:|replica|check failed|exchange" $O/test_allreduce.txt | head -8
for w in 1 2 4; do for k in 4 0; do row cnn-wide 128 3 allreduce $w $k; done; done
for w in 1 4; do for k in 4 0; do row lenet5 64 5 allreduce $w $k; done; done
t runs
timeout 200 bash tools/bench.sh --parallel --bin $R/$B --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --modes "allreduce" --no-literal --no-torch --out $O/bench-cnn > $O/bench-cnn.log 2>&1; t "bench-cnn $?"
grep -A 6 "^| mode" $O/bench-cnn/README.md | head -6
cd $OUT && tar czf c13.tgz c13
head -4 $O/gpus.txt; cat $O/table.txt
