#!/usr/bin/env bash
# Checks llama.cpp against stretch's conformance pack (`stretch conformance --out DIR`,
# src/eval/conformance.h): every case's GGUF file is scored by llama-perplexity and by stretch
# (scripts/vs_llamacpp_perplexity.sh) on the same tokens, at a context of 512 (4 times the models'
# trained length), with llama.cpp's KV cache in float32 (its default float16 cache rounds keys and
# values, which on these tiny, sharp models moves the perplexity by up to 3e-4), and each relative
# difference is compared with --tolerance.
#
#   bash scripts/vs_llamacpp_conformance.sh --llama-bin DIR --pack DIR [--text FILE]
#        [--tolerance 1e-4]
#
# The text defaults to the pack's text.txt (plain ASCII: llama-tokenize's ids, which stretch then
# scores, are what llama-perplexity reads). The `mistral` case is
# reported but not judged: llama.cpp's llama architecture ignores llama.attention.sliding_window.
# Exit status 1 when a judged case differs by more than the tolerance.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="" PACK="" TEXT="" TOLERANCE=1e-4
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bin) LLAMA_BIN=$2; shift 2 ;;
    --pack) PACK=$2; shift 2 ;;
    --text) TEXT=$2; shift 2 ;;
    --tolerance) TOLERANCE=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$LLAMA_BIN" ] && [ -n "$PACK" ] || { echo "give --llama-bin DIR and --pack DIR" >&2; exit 2; }
[ -f "$PACK/tokens.json" ] || { echo "$PACK: no tokens.json, not a conformance pack" >&2; exit 2; }
TEXT=${TEXT:-$PACK/text.txt}
failed=0
for dir in "$PACK"/*/; do
  name=$(basename "$dir")
  [ -f "$dir/model.gguf" ] || continue
  out=$(bash scripts/vs_llamacpp_perplexity.sh --llama-bin "$LLAMA_BIN" --model "$dir/model.gguf" \
    --text "$TEXT" --ctx 512 --chunks 4 -- -fa off -ctk f32 -ctv f32 2>&1) || {
    echo "$name: failed to run"; echo "$out" | tail -5; failed=1; continue; }
  diff=$(echo "$out" | grep -o 'relative difference [0-9.e+-]*' | awk '{print $3}')
  if [ "$name" = mistral ]; then
    echo "$name: relative difference $diff (not judged: llama.cpp ignores the sliding window)"
  elif python3 -c "import sys; sys.exit(0 if float('$diff') <= float('$TOLERANCE') else 1)"; then
    echo "$name: relative difference $diff: agrees"
  else
    echo "$name: relative difference $diff: DIFFERS (tolerance $TOLERANCE)"; failed=1
  fi
done
exit $failed
