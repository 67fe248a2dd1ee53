#!/usr/bin/env bash
# Greedy decoding in both engines on the same GGUF file: llama.cpp's `llama-completion` and
# `stretch generate`, the same prompt, N new tokens at temperature 0, past any end-of-text token
# (--ignore-eos), llama.cpp with flash attention off and a float32 KV cache (its exact path) and
# the prompt's echo first in both (llama.cpp's after a SentencePiece space). The outputs are
# compared byte for byte: "same" when stretch's N generated tokens, as bytes, begin llama.cpp's
# continuation; otherwise the byte where they part and each engine's text from there. Two
# spellings differ between the engines and are left out of stretch's side first (and counted):
# the vocabulary's control and unknown tokens (GGUF token types 3 and 2: llama.cpp prints them as
# nothing, stretch prints <unk> as its text), and the NUL byte (llama.cpp prints each token with
# printf's %s, which stops at it). Both engines' --ignore-eos never choose a token that ends
# generation (EOS, <|eot_id|>, <|im_end|>, ...). llama.cpp is asked for N + 32 tokens and tried
# up to three times, because
# llama-completion prints through an asynchronous log whose last lines can be lost at exit
# (measured at d32676d: 12 runs of one command printed 172 to 194 bytes). Not run in CI (it needs
# a llama.cpp build beside the project: see scripts/vs_llamacpp.sh).
#
#   bash scripts/vs_llamacpp_greedy.sh --llama-bin DIR (--model M.gguf | --pack DIR)
#        [--prompt TEXT] [-n N] [--stretch-flags "FLAGS"] [-- MORE llama-completion flags]
#
# MORE flags go after the defaults (-fa off -ctk f32 -ctv f32), so a later one wins (-c 512, say).
#
# --pack DIR: every CASE/model.gguf of a conformance pack (`stretch conformance --out DIR`). Two
# cases are reported, not judged: `mistral` (llama.cpp's llama architecture ignores its window,
# which matters once the text is longer than 32 tokens) and `phi3-longrope` (llama.cpp picks
# LongRoPE's short or long factors by its context size, which it rounds up to a multiple of 256
# (src/llama-context.cpp at d32676d), so for the pack's original length of 128 it always takes the
# long list; stretch, as transformers, takes the short one while the sequence is no longer than
# 128 tokens). Both engines read the file's own position
# method. Identical bytes mean the same tokens in all but a vocabulary with two spellings of one
# byte string; random-weight models sit near ties, so a parting after some tokens can be float
# rounding (`stretch score --per-token` on both continuations says how near).
# Exit status 1 when a judged model's outputs differ.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN="" MODEL="" PACK="" PROMPT="Once upon a time" N=64 STRETCH_FLAGS=""
EXTRA=(-fa off -ctk f32 -ctv f32)
while (($#)); do
  case $1 in
    --llama-bin | --model | --pack | --prompt | -n | --stretch-flags)
      (($# >= 2)) || { echo "$1 needs a value (see the header of $0)" >&2; exit 2; } ;;
  esac
  case $1 in
    --llama-bin) LLAMA_BIN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --pack) PACK=$2; shift 2 ;;
    --prompt) PROMPT=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --stretch-flags) STRETCH_FLAGS=$2; shift 2 ;;
    --) shift; EXTRA+=("$@"); break ;;
    *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$LLAMA_BIN" ] || { echo "missing --llama-bin DIR (llama.cpp's build/bin)" >&2; exit 2; }
[ -x "$LLAMA_BIN/llama-completion" ] ||
  { echo "$LLAMA_BIN/llama-completion: not found (build llama.cpp's llama-completion)" >&2; exit 2; }
if [ -n "$PACK" ] && [ -n "$MODEL" ]; then echo "give --model or --pack, not both" >&2; exit 2; fi
[ -n "$PACK$MODEL" ] || { echo "give --model M.gguf or --pack DIR" >&2; exit 2; }
[[ $N =~ ^[0-9]+$ ]] && ((N > 0)) || { echo "-n $N: expected a positive number" >&2; exit 2; }
STRETCH=${STRETCH:-build/release/stretch}
[ -x "$STRETCH" ] || { echo "$STRETCH: not built (bash scripts/setup.sh, or STRETCH=path)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# compare_outputs NAME JUDGED LAST MODEL: 0 same (or not judged), 1 different, 3 llama.cpp's output cut
# short before stretch's ended (tried again unless LAST).
compare_outputs() {
  python3 - "$1" "$work/stretch.out" "$work/llama.out" "$PROMPT" "$2" "$3" "$N" "$4" <<'PY'
import struct, sys
name, judged, last, n = sys.argv[1], sys.argv[5] == "1", sys.argv[6] == "1", sys.argv[7]
s, l = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
prompt = sys.argv[4].encode()

def special_spellings(path):
    """The GGUF vocabulary's control (3) and unknown (2) tokens, from the metadata alone."""
    f = open(path, "rb")
    def u(fmt):
        return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]
    def string():
        return f.read(u("Q"))
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def value(t):
        if t == 8:
            return string()
        if t == 9:
            item, count = u("I"), u("Q")
            return [value(item) for _ in range(count)]
        raw = f.read(sizes[t])
        return int.from_bytes(raw, "little", signed=t in (1, 3, 5, 11)) if t not in (6, 12) else 0
    if f.read(4) != b"GGUF":
        return []
    u("I"); u("Q")
    tokens = types = None
    for _ in range(u("Q")):
        key, t = string(), u("I")
        v = value(t)
        if key == b"tokenizer.ggml.tokens":
            tokens = v
        elif key == b"tokenizer.ggml.token_type":
            types = v
    if tokens is None or types is None:
        return []
    return sorted({tok for tok, ty in zip(tokens, types) if ty in (2, 3) and tok}, key=len,
                  reverse=True)
s = s[:-1] if s.endswith(b"\n") else s  # stretch ends its output with a newline of its own
outs = []
for what, out in (("stretch", s), ("llama.cpp", l)):
    # llama.cpp's echo may begin with BOS's text (--special) or a SentencePiece space.
    at = out.find(prompt, 0, len(prompt) + 32)
    if at < 0:
        print(f"{name}: {what}'s output does not begin with the prompt: {out[:80]!r}")
        sys.exit(1)
    outs.append(out[at + len(prompt):])
s, l = outs
left = s.count(b"\0")
s = s.replace(b"\0", b"")  # llama.cpp's printf stops at NUL: the byte token <0x00> prints nothing
for spelling in special_spellings(sys.argv[8]):
    left += s.count(spelling)
    s = s.replace(spelling, b"")  # llama.cpp prints control and unknown tokens as nothing
if l.startswith(s):
    print(f"{name}: same ({n} tokens, {len(s)} bytes, generated alike"
          + (f"; {left} control, unknown or NUL left out" if left else "") + ")")
    sys.exit(0)
k = next((i for i in range(min(len(s), len(l))) if s[i] != l[i]), min(len(s), len(l)))
if k == len(l) and not last:
    sys.exit(3)
print(f"{name}: DIFFER{'' if judged else ' (not judged)'} from byte {k} of {len(s)}: "
      f"stretch {s[k:k + 24]!r}, llama.cpp {l[k:k + 24]!r}"
      + (" (llama.cpp's output ends there, cut at exit three times)" if k == len(l) else ""))
sys.exit(1 if judged else 0)
PY
}

# compare NAME MODEL JUDGED: prints one line, returns 1 when judged and different.
compare() {
  local name=$1 model=$2 judged=$3 try status
  # shellcheck disable=SC2086
  "$STRETCH" generate -m "$model" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos --no-stats \
    $STRETCH_FLAGS >"$work/stretch.out" 2>"$work/stretch.err" ||
    { echo "$name: stretch generate failed:"; tail -5 "$work/stretch.err"; return 1; }
  for try in 1 2 3; do
    "$LLAMA_BIN/llama-completion" -m "$model" -p "$PROMPT" -n "$((N + 32))" --temp 0 \
      --ignore-eos -t "$(nproc)" --no-warmup "${EXTRA[@]}" >"$work/llama.out" \
      2>"$work/llama.err" </dev/null ||
      { echo "$name: llama-completion failed:"; tail -5 "$work/llama.err"; return 1; }
    status=0
    compare_outputs "$name" "$judged" "$([ "$try" = 3 ] && echo 1 || echo 0)" "$model" ||
      status=$?
    [ "$status" = 3 ] || return "$status"
  done
}

failed=0
if [ -n "$MODEL" ]; then
  compare "$(basename "$MODEL")" "$MODEL" 1 || failed=1
else
  cases=0
  for dir in "$PACK"/*/; do
    name=$(basename "$dir")
    [ -f "$dir/model.gguf" ] || continue
    cases=$((cases + 1))
    judged=1
    case $name in mistral | phi3-longrope) judged=0 ;; esac
    compare "$name" "$dir/model.gguf" "$judged" || failed=1
  done
  ((cases > 0)) || { echo "$PACK: no CASE/model.gguf in it, not a conformance pack" >&2; exit 2; }
fi
exit $failed
