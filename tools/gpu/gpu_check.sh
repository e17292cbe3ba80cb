#!/usr/bin/env bash
# gpu_check.sh - everything a GPU host must confirm, in one call: build, the GPU tests (CUDA
# parity, NCCL all-reduce), compute-sanitizer memcheck over the parity test, a checkpoint from a
# GPU run read back by Python's safetensors, then the one-GPU throughput next to PyTorch
# (tools/gpu_perf.sh) and, with several GPUs, the scaling table (tools/scaling.sh).
#
# Usage: tools/gpu_check.sh [--data DIR] [--torch-ref tools/torch_lenet.py] [--stb DIR] [--out DIR]
#                           [--skip-perf] [--skip-scaling]
# --data defaults to datasets/fashion-mnist, then /usr/share/datasets/fashion-mnist.
# Logs go to OUT (default results); the last lines printed are a short summary.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/lib.sh"
gt_prog=gpu_check
data="" ref="$root/tools/torch_lenet.py" stb="" out="$root/results" perf=1 scaling=1
while [ $# -gt 0 ]; do
    case "$1" in
        --help) gt_usage "$0"; exit 0 ;;
        --data | --torch-ref | --stb | --out) need_value "$1" $# ;;&
        --data) data=$2; shift 2 ;;
        --torch-ref) ref=$2; shift 2 ;;
        --stb) stb=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --skip-perf) perf=0; shift ;;
        --skip-scaling) scaling=0; shift ;;
        *) usage_error "unknown option '$1'" ;;
    esac
done
[ -f "$ref" ] || usage_error "--torch-ref: '$ref' not found"
gt_find_data
mkdir -p "$out"
summary=()
step() { summary+=("$1: $2"); echo "== $1: $2"; }

nvidia-smi -L
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release ${stb:+-DGT_STB_DIR=$stb} >"$out/cmake.log" 2>&1 &&
    cmake --build "$root/build" -j"$(nproc)" >"$out/build.log" 2>&1
step build "$([ $? -eq 0 ] && echo ok || echo FAILED)"
bin=$root/build/gputrain

GT_DATA=$data ctest --test-dir "$root/build" -R 'cuda' --output-on-failure >"$out/gpu-tests.log" 2>&1
step "GPU tests" "$(grep -E 'tests passed|tests failed' "$out/gpu-tests.log" | tail -1)"
grep -E '^timing|^allreduce x|^abort' "$out/gpu-tests.log" | sed 's/^/  /'

if command -v compute-sanitizer >/dev/null; then
    GT_DATA=$data timeout 240 compute-sanitizer --tool memcheck --leak-check full "$root/build/test_cuda_parity" \
        >"$out/memcheck.log" 2>&1
    step "compute-sanitizer memcheck (test_cuda_parity)" "$(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
fi

"$bin" --data "$data" --gpus 0 --epochs 1 --checkpoint "$out/gpu-run.safetensors" --quiet --no-progress &&
    python3 "$root/tools/check_safetensors.py" "$out/gpu-run.safetensors" >"$out/safetensors.log" 2>&1
step "GPU checkpoint read by Python safetensors" "$([ $? -eq 0 ] && echo ok || echo FAILED) ($(tail -1 "$out/safetensors.log"))"

if [ $perf -eq 1 ]; then
    bash "$root/tools/gpu/gpu_perf.sh" --data "$data" --torch-ref "$ref" --bin "$bin" --out "$out" >"$out/perf.log" 2>&1
    step "one-GPU perf" "$(grep -c '' "$out/perf.log") lines, see perf-*.md"
fi
if [ $scaling -eq 1 ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    bash "$root/tools/gpu/scaling.sh" --data "$data" --torch-ref "$ref" --bin "$bin" --out "$out" >"$out/scaling.log" 2>&1
    step "scaling" "see scaling-*.md"
fi
echo
printf '%s\n' "${summary[@]}"
cat "$out"/perf-*.md 2>/dev/null | grep -E '^\|' | head -20
cat "$out"/scaling-*.md 2>/dev/null | grep -E '^\|' | head -30
