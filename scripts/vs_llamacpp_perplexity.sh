#!/usr/bin/env bash
# stretch's scores against llama.cpp's llama-perplexity on the same model file and the same
# tokens. Not run in CI (it needs a llama.cpp build: see scripts/vs_llamacpp.sh for one).
#
#   bash scripts/vs_llamacpp_perplexity.sh --llama-bin DIR --model M.gguf --text FILE --ctx N
#        [--chunks K] [--stretch-flags "FLAGS"] [-- EXTRA llama-perplexity flags]
#
# --stretch-flags: more flags for `stretch score` (e.g. "--cache-type f16" beside llama.cpp's
# "-ctk f16 -ctv f16").
#
# llama-perplexity's protocol (tools/perplexity/perplexity.cpp, at d32676d): the text is tokenized
# whole with BOS in front, cut into chunks of N tokens; each chunk's first token is replaced by
# BOS; the chunk is run, and the positions N/2 .. N-2 are scored (position p predicts token
# p + 1); the "Final estimate" is exp of the mean loss over every scored token of every chunk.
# Here the text is tokenized by llama-tokenize with the same model, the same chunks are written
# as stretch token sequences (one per line) and scored by `stretch score --tokens --per-token`,
# and the same positions are averaged. Both engines read the model file's own position method
# (a GGUF file that says YaRN runs YaRN in both); EXTRA flags go to llama-perplexity only
# (default: -fa off -ctk f32 -ctv f32, llama.cpp's exact path). Its CPU flash attention and its
# default float16 KV cache are the less exact ones: measured on stories260K at 2048 tokens (4
# chunks), its perplexity differs from stretch's by 7.6e-4 with -fa on, by 5e-5 with -fa off and
# a float16 cache, by 3e-6 with both off; with llama3 scaling from 512 (a sharper case) by 4.6e-4
# with a float16 cache and 5.8e-6 without.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="" MODEL="" TEXT="" CTX="" CHUNKS=8 EXTRA=(-fa off -ctk f32 -ctv f32) STRETCH_FLAGS=
while (($#)); do
  case $1 in
    --llama-bin) LLAMA_BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --text) TEXT=$2; shift 2 ;;
    --ctx) CTX=$2; shift 2 ;;
    --chunks) CHUNKS=$2; shift 2 ;;
    --stretch-flags) STRETCH_FLAGS=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
for v in LLAMA_BIN MODEL TEXT CTX; do
  [ -n "${!v}" ] || { echo "missing --$(echo $v | tr A-Z_ a-z-)" >&2; exit 2; }
done
STRETCH=${STRETCH:-build/release/stretch}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$LLAMA_BIN/llama-tokenize" -m "$MODEL" -f "$TEXT" --ids --log-disable >"$work/ids.txt" 2>/dev/null
# The vocabulary's BOS as llama.cpp adds it: one word tokenized with and without --no-bos; the
# first id when the two differ by one ("[1]" for LLaMA 2's vocabulary, none for a vocabulary that
# adds none, as the npm copy of Llama 3's tokenizer.json or Qwen's). (An empty prompt is refused by
# llama-tokenize.)
"$LLAMA_BIN/llama-tokenize" -m "$MODEL" -p "a" --ids --log-disable >"$work/with.txt" 2>/dev/null
"$LLAMA_BIN/llama-tokenize" -m "$MODEL" -p "a" --ids --log-disable --no-bos >"$work/without.txt" \
  2>/dev/null
python3 - "$work/ids.txt" "$CTX" "$CHUNKS" "$work/chunks.txt" "$work/with.txt" "$work/without.txt" <<'EOF'
import sys
def read_ids(path):
    text = open(path).read().strip().strip('[]').strip()
    return [int(x) for x in text.split(',')] if text else []
ids = read_ids(sys.argv[1])
with_bos, without_bos = read_ids(sys.argv[5]), read_ids(sys.argv[6])
if len(with_bos) == len(without_bos) + 1 and with_bos[1:] == without_bos:
    bos = with_bos[:1]
elif with_bos == without_bos:
    bos = []
else:
    sys.exit(f"llama-tokenize gave {with_bos} for 'a', and {without_bos} with --no-bos")
n, k = int(sys.argv[2]), int(sys.argv[3])
# llama-perplexity tokenizes the text with the vocabulary's BOS in front (llama-tokenize already
# put it there) and, when the vocabulary adds one, makes it every chunk's first token.
chunks = [ids[i * n:(i + 1) * n] for i in range(min(k, len(ids) // n))]
with open(sys.argv[4], "w") as f:
    for c in chunks:
        f.write(" ".join(map(str, bos + c[len(bos):])) + "\n")
print(f"{len(ids)} tokens, {len(chunks)} chunks of {n}, BOS {bos[0] if bos else 'none'}",
      file=sys.stderr)
EOF
"$LLAMA_BIN/llama-perplexity" -m "$MODEL" -f "$TEXT" -c "$CTX" -b "$CTX" --chunks "$CHUNKS" \
  -t "$(nproc)" "${EXTRA[@]}" >"$work/llama.txt" 2>&1 || { cat "$work/llama.txt"; exit 1; }
llama=$(grep -o 'Final estimate: PPL = [0-9.]*' "$work/llama.txt" | awk '{print $NF}' || true)
if [ -z "$llama" ]; then
  echo "llama-perplexity printed no final estimate; the end of its output:" >&2
  tail -20 "$work/llama.txt" >&2
  exit 1
fi
"$STRETCH" score -m "$MODEL" --tokens "$work/chunks.txt" --ctx "$CTX" --per-token "$work/t.csv" \
  --no-progress $STRETCH_FLAGS >"$work/stretch.txt"
python3 - "$work/t.csv" "$CTX" "$llama" <<'EOF'
import csv, math, sys
n = int(sys.argv[2])
losses = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))
          if n // 2 <= int(r["position"]) <= n - 2]
ppl = math.exp(sum(losses) / len(losses))
llama = float(sys.argv[3])
print(f"scored tokens: {len(losses)}")
print(f"llama-perplexity: PPL = {llama:.4f}")
print(f"stretch score:    PPL = {ppl:.4f}   (relative difference {abs(ppl - llama) / llama:.2e})")
EOF
