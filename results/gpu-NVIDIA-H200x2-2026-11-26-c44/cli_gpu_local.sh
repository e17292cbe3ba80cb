#!/bin/bash
# The kill, fault and resume cases by hand on GPUs for local on the device step (2 GPUs,
# --sync-every 5, so its barriers fall at averages, off allreduce's every 64th clock), with
# allreduce beside it. Prints one line per check.
BIN=$1 DATA=$2 T=$(mktemp -d)
ok() { echo "ok   $*"; } ; bad() { echo "FAIL $*"; }
C=(--data "$DATA" --no-progress --batch 64)
wait_eval() { for _ in $(seq 1 300); do grep -q '"type":"eval"' "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
for spec in "local:0,1:--sync-every 5" "allreduce:0,1:"; do
  IFS=: read -r mode gpus extra <<< "$spec"; tag="$mode --gpus $gpus $extra"
  rm -f $T/ck* $T/log.jsonl
  $BIN "${C[@]}" --gpus $gpus --mode $mode $extra --epochs 100000 --eval-every 200 --checkpoint $T/ck.safetensors --log $T/log.jsonl > $T/out 2>&1 &
  pid=$!; wait_eval $T/log.jsonl || bad "$tag: no evaluation"
  ts=$(date +%s.%N); kill -INT $pid; wait $pid; rc=$?; te=$(date +%s.%N)
  [ $rc = 130 ] && grep -q "interrupted by signal" $T/out && ok "$tag SIGINT: exit 130 $(awk -v a=$ts -v b=$te 'BEGIN{printf "%.2f", b-a}') s after the signal" || bad "$tag SIGINT: exit $rc: $(tail -2 $T/out)"
  grep -q '"step":"device"' $T/log.jsonl && echo "     (config record: step device)" || echo "     (config record: step store)"
  $BIN eval --data "$DATA" --gpus 0 --checkpoint $T/ck.safetensors > $T/e 2>&1 && ok "$tag: the checkpoint evaluates: $(grep -o 'acc [0-9.]*' $T/e | tail -1)" || bad "$tag eval: $(tail -1 $T/e)"
  $BIN "${C[@]}" --gpus $gpus --mode $mode $extra --epochs 2 --resume $T/ck.safetensors > $T/r 2>&1 && ok "$tag: resumed: $(tail -1 $T/r)" || bad "$tag resume: $(tail -2 $T/r)"
  ts=$(date +%s.%N); timeout 60 $BIN "${C[@]}" --gpus $gpus --mode $mode $extra --epochs 2 --inject-fault 1:300 > $T/f 2>&1; rc=$?; te=$(date +%s.%N)
  [ $rc != 0 ] && [ $rc != 124 ] && ok "$tag --inject-fault 1:300: exit $rc in $(awk -v a=$ts -v b=$te 'BEGIN{printf "%.2f", b-a}') s: $(grep -i 'fault\|fail' $T/f | tail -1)" || bad "$tag inject: exit $rc $(tail -2 $T/f)"
  timeout 100 $BIN "${C[@]}" --gpus $gpus --mode $mode $extra --epochs 3 --lr 10 > $T/g 2>&1; rc=$?
  n=$(grep -c "diverged\|stalled" $T/g)
  [ $n -ge 1 ] && ok "$tag --lr 10: exit $rc, $n guard line(s): $(grep -m1 'diverged\|stalled' $T/g | cut -c1-150); $(tail -1 $T/g | cut -c1-120)" || bad "$tag --lr 10: exit $rc, no guard line: $(tail -2 $T/g)"
done
GT_STEP_PATH=store $BIN "${C[@]}" --gpus 0,1 --mode local --epochs 1 > $T/s 2>&1; grep -q "^note: local" $T/s && bad "GT_STEP_PATH=store: local took the device step" || ok "GT_STEP_PATH=store: local keeps the store ($(tail -1 $T/s | cut -c1-100))"
GT_ALLREDUCE=nccl $BIN "${C[@]}" --gpus 0,1 --mode local --epochs 1 > $T/s 2>&1; rc=$?; grep -q "^note: local" $T/s && bad "GT_ALLREDUCE=nccl: local took the device step" || ok "GT_ALLREDUCE=nccl: local keeps the store, exit $rc ($(tail -1 $T/s | cut -c1-100))"
rm -rf $T
