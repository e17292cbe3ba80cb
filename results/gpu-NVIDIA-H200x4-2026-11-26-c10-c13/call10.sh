#!/bin/bash
# GPU call 10 (4 GPUs): GPU tests (the allreduce rollback among them), the 1-GPU batch-256 stall
# case, the owed 4-GPU benchmark runs (continued matrices), and a recipe exploration grid.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c10
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu10/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built; B=build-cuda/gputrain
(cd build-cuda && GT_SOURCE_DIR=$R timeout 150 ./test_cuda_allreduce > $O/test_allreduce.txt 2>&1; echo "test_cuda_allreduce exit $?" >> $O/test_allreduce.txt)
t "$(tail -1 $O/test_allreduce.txt)"; grep -E "rollback|FAIL|abort:" $O/test_allreduce.txt | head
(cd build-cuda && GT_SOURCE_DIR=$R timeout 100 ./test_cuda_parity > $O/test_parity.txt 2>&1; echo "test_cuda_parity exit $?" >> $O/test_parity.txt); t "$(tail -1 $O/test_parity.txt)"
for s in 1 2; do $B --data $D --gpus 0 --mode allreduce --batch 256 --epochs 3 --seed $s --no-progress --log $O/b256-s$s.jsonl > $O/b256-s$s.txt 2>&1; echo "b256 seed $s exit $?: $(grep -E 'stalled|diverged|done:' $O/b256-s$s.txt | tr '\n' ' ')"; done | tee $O/b256.txt
t b256
# owed 4-GPU benchmark runs: the same commands continue the matrices (kept runs are not rerun)
cp -r results/bench-NVIDIA-H100x4-2026-11-26-cnn-wide $O/bench-cnn; cp -r results/bench-NVIDIA-H100x4-2026-11-26-lenet5 $O/bench-lenet5
if grep -q "H100" $O/gpus.txt; then
  timeout 150 bash tools/bench.sh --parallel --bin $R/$B --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --no-literal --no-torch --out $O/bench-cnn > $O/bench-cnn.log 2>&1; t "bench-cnn $?"
  timeout 150 bash tools/bench.sh --parallel --bin $R/$B --data $D --epochs 10 --seeds "1 2 3 4 5 6 7 8 9 10" --no-literal --torch-seeds "1 2" --out $O/bench-lenet5 > $O/bench-lenet5.log 2>&1; t "bench-lenet5 $?"
else echo "not H100: owed runs not mixed into the H100 matrices"; fi
# exploration: lenet5 10 epochs, seeds 1-6; W=2 two runs at a time (GPUs 0,1 and 2,3), W=4 alone
ex() { # W gpus seed label args...
  local w=$1 g=$2 s=$3 l=$4; shift 4
  local a; a=$($B --data $D --gpus $g --epochs 10 --seed $s --no-progress --quiet "$@" 2>&1 | grep -o "test acc [0-9.]*" | tail -1 | cut -d' ' -f3)
  echo "$w|$l|$s|${a:-fail}" >> $O/explore.txt
}
E2=("ssp2-lr0.1|--mode ssp --staleness 2 --lr 0.1 --momentum 0.79" "ssp2-lr0.2-m0|--mode ssp --staleness 2 --lr 0.2 --momentum 0" "ssp4-lr0.1|--mode ssp --staleness 4 --lr 0.1 --momentum 0.7" "ssp4-lr0.2-m0|--mode ssp --staleness 4 --lr 0.2 --momentum 0" "ovl-lr0.1|--overlap --lr 0.1 --momentum 0.4" "ovl-m0.5-lr0.075|--overlap --lr 0.075 --momentum 0.5")
E4=("hog-lr0.075|--lr 0.075 --momentum 0.3" "hog-lr0.1-m0.15|--lr 0.1 --momentum 0.15" "ssp2-lr0.1|--mode ssp --staleness 2 --lr 0.1 --momentum 0.63" "ssp2-lr0.2-m0|--mode ssp --staleness 2 --lr 0.2 --momentum 0" "ssp4-lr0.2-m0|--mode ssp --staleness 4 --lr 0.2 --momentum 0" "ovl-lr0.075|--overlap --lr 0.075 --momentum 0.23" "sync-lr0.1|--mode sync --lr 0.1")
for e in "${E2[@]}"; do l=${e%%|*}; a=${e#*|}
  for s in 1 3 5; do ex 2 0,1 $s $l $a & ex 2 2,3 $((s+1)) $l $a; wait; done; done; t explore2
for e in "${E4[@]}"; do l=${e%%|*}; a=${e#*|}
  for s in 1 2 3 4 5 6; do ex 4 0,1,2,3 $s $l $a; done; done; t explore4
cd $OUT && tar czf c10.tgz c10
cat $O/gpus.txt | head -4; cat $O/b256.txt
grep -h "not rerun\|runs to do\|^\[" $O/bench-*.log | tail -6
sort -t'|' -k1,1 -k2,2 -k3,3n $O/explore.txt | awk -F'|' '{k=$1"|"$2; a[k]=a[k]" "$4; n[k]++; s[k]+=$4} END{for(k in a) printf "%s %s mean %.4f\n", k, a[k], s[k]/n[k]}' | sort
