#!/bin/bash
# GPU call 15 (one GPU): onegpu_check (layer-path variants, TF32 both ways, lenet5, launch to exit,
# PyTorch's whole-step graph beside them) and Nsight Compute's per-kernel times of a cnn-wide
# step, gputrain's and PyTorch's graph, FP32.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb O=$OUT/c15
mkdir -p $O; export GT_DATA=$D GT_COMMIT=$(cat .gpu15/commit) GT_STB_DIR=$S NCCL_NVLS_ENABLE=0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi -L > $O/gpus.txt
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > $O/build.log 2>&1 && cmake --build build-cuda -j16 >> $O/build.log 2>&1 || { t BUILD FAILED; tail -30 $O/build.log; exit 1; }
t built
timeout 300 bash tools/onegpu_check.sh --data $D --skip-sanitizer --epochs 3 > $O/onegpu.txt 2>&1; t "onegpu $?"
NCU=/usr/local/cuda/bin/ncu
timeout 120 $NCU --launch-skip 2000 --launch-count 40 --section SpeedOfLight --csv --page raw --metrics gpu__time_duration.sum build-cuda/gputrain --data $D --gpus 0 --model cnn-wide --batch 128 --mode allreduce --epochs 1 --quiet --no-progress > $O/ncu-gputrain.csv 2> $O/ncu-gputrain.err; t "ncu gputrain $?"
timeout 150 $NCU --launch-skip 3000 --launch-count 40 --section SpeedOfLight --csv --page raw --metrics gpu__time_duration.sum python3 tools/torch_lenet.py --data $D --model cnn-wide --batch 128 --epochs 1 --graph 1 --tf32 0 > $O/ncu-torch.csv 2> $O/ncu-torch.err; t "ncu torch $?"
cd $OUT && tar czf c15.tgz c15
tail -32 $O/onegpu.txt
for f in gputrain torch; do echo "== ncu $f"; python3 - $O/ncu-$f.csv <<'PY'
import csv,sys
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>5]
if not rows: print("no rows"); sys.exit()
h=rows[0]; ni=h.index("Kernel Name") if "Kernel Name" in h else None; ti=h.index("gpu__time_duration.sum") if "gpu__time_duration.sum" in h else None
if ni is None or ti is None: print(h[:12]); sys.exit()
print("unit", rows[1][ti]); tot=0
for r in rows[2:]:
    try: v=float(r[ti])
    except: continue
    tot+=v; print(f"{v/1000:9.1f} us  {r[ni][:90]}")
print(f"total {tot/1000:.1f} us over {len(rows)-2} kernels")
PY
done
