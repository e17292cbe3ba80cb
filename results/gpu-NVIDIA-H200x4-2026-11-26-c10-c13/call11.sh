#!/bin/bash
# GPU call 11 (4 GPUs): the allreduce rollback test; ssp's plain-SGD rule against the momentum rule,
# 10 seeds, same call; cnn-wide allreduce and local at 1, 2, 4 GPUs (3 seeds).
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c11
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu11/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built; B=build-cuda/gputrain
(cd build-cuda && GT_SOURCE_DIR=$R timeout 150 ./test_cuda_allreduce > $O/test_allreduce.txt 2>&1; echo "test_cuda_allreduce exit $?" >> $O/test_allreduce.txt)
t "$(tail -1 $O/test_allreduce.txt)"; grep -E "rollback|check failed" $O/test_allreduce.txt | head -5
ex() { # W gpus seed label args...
  local w=$1 g=$2 s=$3 l=$4; shift 4
  local a; a=$($B --data $D --gpus $g --epochs 10 --seed $s --no-progress --quiet "$@" 2>&1 | grep -o "test acc [0-9.]*" | tail -1 | cut -d' ' -f3)
  echo "$w|$l|$s|${a:-fail}" >> $O/ssp.txt
}
for st in 2 4; do
  m2=0.79; m4=0.63; [ $st = 4 ] && { m2=0.7; m4=0.47; }
  for s in 1 3 5 7 9; do
    ex 2 0,1 $s "s$st-plain" --mode ssp --staleness $st & ex 2 2,3 $((s+1)) "s$st-plain" --mode ssp --staleness $st; wait
    ex 2 0,1 $s "s$st-mrule" --mode ssp --staleness $st --lr 0.05 --momentum $m2 & ex 2 2,3 $((s+1)) "s$st-mrule" --mode ssp --staleness $st --lr 0.05 --momentum $m2; wait
  done
  for s in 1 2 3 4 5 6 7 8 9 10; do
    ex 4 0,1,2,3 $s "s$st-plain" --mode ssp --staleness $st
    ex 4 0,1,2,3 $s "s$st-mrule" --mode ssp --staleness $st --lr 0.05 --momentum $m4
  done
done; t ssp
timeout 200 bash tools/bench.sh --parallel --bin $R/$B --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --modes "allreduce local-k4" --no-literal --no-torch --out $O/bench-cnn > $O/bench-cnn.log 2>&1; t "bench-cnn $?"
cd $OUT && tar czf c11.tgz c11
head -4 $O/gpus.txt
sort -t'|' -k1,1 -k2,2 -k3,3n $O/ssp.txt | awk -F'|' '{k=$1"|"$2; a[k]=a[k]" "$4; n[k]++; s[k]+=$4; if(!(k in mn)||$4<mn[k])mn[k]=$4} END{for(k in a) printf "%s %s mean %.4f min %.4f\n", k, a[k], s[k]/n[k], mn[k]}' | sort
grep -A 12 "^| mode" $O/bench-cnn/README.md | head -8
