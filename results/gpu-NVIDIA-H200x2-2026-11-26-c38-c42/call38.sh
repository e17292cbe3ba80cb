#!/bin/bash
# GPU call 38: the GPU tests of this commit (new; the fused peer sum and update, the hogwild
# phases) and of 2ac92ce (base, the last session's end, owed); allreduce 1 and 2 GPUs, lenet5
# b64 and cnn-wide b128, both builds; where hogwild's store step goes (tools/step_phases.py),
# lenet5 and cnn-wide, 1 GPU on the store path and 2 GPUs.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c38; export S
mkdir -p $O; export GT_DATA=$D GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt; nproc >> $O/gpus.txt; lscpu | grep -i "model name\|numa node" >> $O/gpus.txt; nvidia-smi topo -m >> $O/gpus.txt 2>&1
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
BASE=$R/.gpu38/base/build/gputrain
(cd .gpu38/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build-base.log 2>&1 && cmake --build build -j32 --target gputrain test_cuda_allreduce test_cuda_parity >> $O/build-base.log 2>&1) || { t BASE BUILD FAILED; tail -20 $O/build-base.log; exit 1; }
t built
for b in new base; do
  dir=$R/build-cuda; [ $b = base ] && dir=$R/.gpu38/base/build
  (cd $dir && timeout 170 ./test_cuda_allreduce > $O/test_cuda_allreduce-$b.log 2>&1); echo "$b test_cuda_allreduce rc $?" | tee -a $O/tests.txt
  grep -i "fail\|p2p sum and" $O/test_cuda_allreduce-$b.log | head -8
  (cd $dir && timeout 100 ./test_cuda_parity > $O/test_cuda_parity-$b.log 2>&1); echo "$b test_cuda_parity rc $?" | tee -a $O/tests.txt
  grep -i "fail" $O/test_cuda_parity-$b.log | head -5
  t "tests $b"
done
for b in base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$BASE
  export GT_COMMIT=$([ $b = base ] && echo 2ac92ce || cat .gpu38/commit)
  timeout 60 tools/bench.sh --bin $bin --data $D --epochs 3 --seeds "1 2" --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-lenet5-$b > $O/ar-lenet5-$b.log 2>&1; t "ar lenet5 $b exit $?"
  timeout 60 tools/bench.sh --bin $bin --data $D --model cnn-wide --batch 128 --epochs 3 --seeds 1 --workers "1 2" --modes allreduce --no-literal --no-torch --out $O/ar-cnn-wide-$b > $O/ar-cnn-wide-$b.log 2>&1; t "ar cnn-wide $b exit $?"
done
mkdir -p $O/phases
B=$R/build-cuda/gputrain
for m in lenet5:64 cnn-wide:128; do
  model=${m%:*} batch=${m#*:}
  GT_STEP_PATH=store timeout 40 $B --data $D --model $model --batch $batch --gpus 0 --epochs 3 --no-progress --log $O/phases/$model-w1-store.jsonl > $O/phases/$model-w1-store.out 2>&1
  timeout 40 $B --data $D --model $model --batch $batch --gpus 0,1 --epochs 3 --no-progress --log $O/phases/$model-w2.jsonl > $O/phases/$model-w2.out 2>&1
  timeout 40 $B --data $D --model $model --batch $batch --gpus 0,1 --epochs 3 --stripes 0 --no-progress --log $O/phases/$model-w2-lockfree.jsonl > $O/phases/$model-w2-lockfree.out 2>&1
  timeout 40 $B --data $D --model $model --batch $batch --gpus 0,1 --epochs 3 --overlap --no-progress --log $O/phases/$model-w2-overlap.jsonl > $O/phases/$model-w2-overlap.out 2>&1
done
t phases
python3 tools/step_phases.py $O/phases/*.jsonl > $O/phases/README.md 2>&1
cd $OUT && tar czf c38.tgz c38
cat $O/tests.txt
for b in base new; do for x in lenet5 cnn-wide; do echo "ar $x $b"; grep "^| " $O/ar-$x-$b/README.md | grep -v "^| mode" | head -3; done; done
cat $O/phases/README.md
