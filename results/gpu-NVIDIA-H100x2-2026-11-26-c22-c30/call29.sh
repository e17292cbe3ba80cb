#!/bin/bash
# GPU call 29: is cnn-wide sync on one GPU the same run twice? Each build twice, seed 2, 3 epochs.
set -u
R=$PWD D=$PWD/.carry/fmnist S=$PWD/.carry/stb
export GT_STB_DIR=$S
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > /dev/null 2>&1 && cmake --build build-cuda -j32 --target gputrain > /dev/null 2>&1 || { echo BUILD FAILED; exit 1; }
(cd .gpu28/base && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGT_STB_DIR=$S -DGT_MPI=OFF > /dev/null 2>&1 && cmake --build build -j32 --target gputrain > /dev/null 2>&1) || { echo BASE BUILD FAILED; exit 1; }
for b in base new base new; do
  bin=$R/build-cuda/gputrain; [ $b = base ] && bin=$R/.gpu28/base/build/gputrain
  echo "$b: $($bin --data $D --gpus 0 --mode sync --model cnn-wide --batch 128 --epochs 3 --seed 2 --no-progress 2>&1 | grep '^done' | grep -o 'test acc [0-9.]*')"
done
