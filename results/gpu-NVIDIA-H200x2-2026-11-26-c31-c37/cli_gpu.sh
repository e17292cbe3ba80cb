#!/bin/bash
# The kill, fault and resume cases by hand on GPUs: one worker's device step (hogwild, sync),
# allreduce on 2 GPUs (pipelined), hogwild on 2 GPUs (the store). Prints one line per check.
BIN=$1 DATA=$2 T=$(mktemp -d)
ok() { echo "ok   $*"; } ; bad() { echo "FAIL $*"; }
C=(--data "$DATA" --no-progress --batch 64)
wait_eval() { for _ in $(seq 1 300); do grep -q '"type":"eval"' "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
for spec in "hogwild:0" "sync:0" "allreduce:0,1" "hogwild:0,1"; do
  mode=${spec%%:*} gpus=${spec#*:}; tag="$mode --gpus $gpus"
  rm -f $T/ck* $T/log.jsonl
  t0=$(date +%s.%N)
  $BIN "${C[@]}" --gpus $gpus --mode $mode --epochs 100000 --eval-every 200 --checkpoint $T/ck.safetensors --log $T/log.jsonl > $T/out 2>&1 &
  pid=$!; wait_eval $T/log.jsonl || bad "$tag: no evaluation"
  ts=$(date +%s.%N); kill -INT $pid; wait $pid; rc=$?; te=$(date +%s.%N)
  [ $rc = 130 ] && grep -q "interrupted by signal" $T/out && ok "$tag SIGINT: exit 130 $(awk -v a=$ts -v b=$te 'BEGIN{printf "%.2f", b-a}') s after the signal" || bad "$tag SIGINT: exit $rc: $(tail -2 $T/out)"
  grep -q '"step":"device"' $T/log.jsonl && echo "     (config record: step device)" || echo "     (config record: step store)"
  $BIN eval --data "$DATA" --gpus 0 --checkpoint $T/ck.safetensors > $T/e 2>&1 && ok "$tag: the checkpoint evaluates: $(grep -o 'acc [0-9.]*' $T/e | tail -1)" || bad "$tag eval: $(tail -1 $T/e)"
  ep=$(grep -c '"type":"eval","epoch"' $T/log.jsonl)
  $BIN "${C[@]}" --gpus $gpus --mode $mode --epochs 2 --resume $T/ck.safetensors > $T/r 2>&1 && ok "$tag: resumed: $(tail -1 $T/r)" || bad "$tag resume: $(tail -2 $T/r)"
  ts=$(date +%s.%N); timeout 60 $BIN "${C[@]}" --gpus $gpus --mode $mode --epochs 2 --inject-fault 0:300 > $T/f 2>&1; rc=$?; te=$(date +%s.%N)
  [ $rc != 0 ] && [ $rc != 124 ] && ok "$tag --inject-fault 0:300: exit $rc in $(awk -v a=$ts -v b=$te 'BEGIN{printf "%.2f", b-a}') s: $(grep -i 'fault\|fail' $T/f | tail -1)" || bad "$tag inject: exit $rc $(tail -2 $T/f)"
done
# one worker: a run of 2 epochs straight against 1 epoch, checkpoint, resume to 2 (same bits expected)
for mode in hogwild sync; do
  $BIN "${C[@]}" --gpus 0 --mode $mode --epochs 2 --seed 3 > $T/a 2>&1
  $BIN "${C[@]}" --gpus 0 --mode $mode --epochs 1 --seed 3 --checkpoint $T/h.safetensors > /dev/null 2>&1
  $BIN "${C[@]}" --gpus 0 --mode $mode --epochs 2 --seed 3 --resume $T/h.safetensors > $T/b 2>&1
  a=$(grep -o 'test acc [0-9.]*' $T/a | tail -1) b=$(grep -o 'test acc [0-9.]*' $T/b | tail -1)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$mode --gpus 0: 2 epochs straight and 1 + resumed 1 end alike ($a)" || bad "$mode --gpus 0: straight '$a', resumed '$b'"
done
$BIN "${C[@]}" --gpus 0 --epochs 1 --on-nan skip > $T/s 2>&1; grep -q "^note: one worker" $T/s && bad "--on-nan skip took the device step" || ok "--on-nan skip: the store's step (no note)"
GT_STEP_PATH=bogus $BIN "${C[@]}" --gpus 0 --epochs 1 > $T/s 2>&1; rc=$?; [ $rc != 0 ] && ok "GT_STEP_PATH=bogus: exit $rc: $(tail -1 $T/s)" || bad "GT_STEP_PATH=bogus accepted"
$BIN "${C[@]}" --gpus 0 --epochs 1 | head -3
rm -rf $T
