#!/usr/bin/env bash
# Regenerates the figures of docs/results.md: every training-free method on stories260K and
# ../shared/data/tinystories at 512 .. 16384 tokens, and the fixed-tail table. Writes JSON into
# docs/results/ and prints the Markdown tables (scripts/results_tables.py) to stdout.
# Takes about half an hour on 2 cores (the dynamic methods re-rotate every key per query).
set -euo pipefail
cd "$(dirname "$0")/.."
S=${STRETCH:-build/release/stretch}
M=../shared/models/stories260K
DATA=../shared/data/tinystories
OUT=docs/results
mkdir -p "$OUT"
METHODS="direct,pi,ntk,ntk-fixed,yarn,yarn+logn,llama3,dynamic-ntk,dynamic-yarn,rerope:window=256,rerope:window=256+logn,leaky-rerope:window=256,self-extend,window,lambda:sinks=4,window=512,string,dca,blockwise"
BUDGET=131072   # target tokens per cell: every length scores the same first 131,072 tokens
for CTX in 512 1024 2048 4096 8192 16384; do
  "$S" score --model $M/stories260K.bin --tokenizer $M/tok512.bin --data $DATA \
    --methods "$METHODS" --ctx $CTX --windows $((BUDGET / CTX)) --no-progress \
    --json-out "$OUT/by_length_$CTX.json" "$@" > /dev/null
done
"$S" score --model $M/stories260K.bin --tokenizer $M/tok512.bin --data $DATA \
  --methods "$METHODS" --ctx 512,1024,2048,4096,8192,16384 --tail 512 --windows 8 \
  --no-progress --json-out "$OUT/fixed_tail.json" "$@" > /dev/null
python3 scripts/results_tables.py "$OUT"
