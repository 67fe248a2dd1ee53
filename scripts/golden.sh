#!/usr/bin/env bash
# The figures a change to the model, the kernels or the position code must not move: per-token
# losses of the shared stories260K model under every method at 2048 tokens, of three small models
# trained here (LLaMA + KERPLE, GAU, hwfa2 + XPOS) under direct, yarn and rerope at 4x their
# length (KERPLE, which has no RoPE, under direct, window and log-n), and the per-step losses of a
# 20-step training run.
#
#   scripts/golden.sh record DIR [STRETCH]   write the figures into DIR (default binary:
#                                            build/release/stretch); needs ../shared
#   scripts/golden.sh compare A B            compare two such folders file by file
#
# Record with the code before a change, again after, and compare: every figure should be equal,
# or within float32 rounding where the change reorders arithmetic (the comparison prints the
# largest difference per file). Training runs with --threads 1 so that a run is repeatable.
set -euo pipefail
cd "$(dirname "$0")/.."

record() {
  local out=$1 S=${2:-build/release/stretch}
  local M=../shared/models/stories260K DATA=../shared/data/tinystories
  [ -f "$M/stories260K.bin" ] || { echo "golden: needs ../shared ($M/stories260K.bin)" >&2; exit 1; }
  mkdir -p "$out"
  local methods=(direct pi ntk ntk-fixed yarn "longrope:short=1/1/1.5/2,long=1/2/4/8" llama3
    dynamic-ntk dynamic-yarn rerope leaky-rerope self-extend string dca window lambda blockwise
    yarn+logn direct+logn)
  for m in "${methods[@]}"; do
    local name=${m%%:*}
    "$S" score -m "$M/stories260K.bin" -t "$M/tok512.bin" --data "$DATA" --ctx 2048 \
      --windows 2 --method "$m" --no-progress --per-token "$out/stories260K-$name.csv" >/dev/null
    echo "golden: stories260K $m"
  done

  local runs="$out/runs" corpus=../shared/data/gutenberg
  mkdir -p "$runs"
  local common=(--data "$corpus" --train-len 64 --batch 4 --dim 32 --save-every 30 --eval-every 0
    --threads 1)
  declare -A variants=(
    [kerple]="--position kerple-log --heads 2 --layers 2"
    [gau]="--block gau:key=16 --layers 2"
    [hwfa2-xpos]="--position xpos --attention hwfa2=16/1 --heads 2 --layers 3"
  )
  for v in kerple gau hwfa2-xpos; do
    # shellcheck disable=SC2086
    "$S" train "${common[@]}" ${variants[$v]} --steps 30 --out "$runs/$v" --overwrite >"$runs/$v.log" 2>&1 || { cat "$runs/$v.log" >&2; exit 1; }
    # KERPLE has no RoPE for yarn or rerope to change: its full layers take masks and log-n.
    local ms="direct yarn rerope:window=32"
    [ "$v" = kerple ] && ms="direct window:window=32 direct+logn"
    for m in $ms; do
      "$S" score -m "$runs/$v" --data "$corpus" --ctx 256 --windows 2 --method "$m" \
        --no-progress --per-token "$out/$v-${m%%:*}.csv" >/dev/null
    done
    echo "golden: trained $v"
  done
  "$S" train "${common[@]}" --layers 2 --steps 20 --out "$runs/steps20" --overwrite >/dev/null 2>&1
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["step"], repr(r["loss"]), repr(r["grad_norm"]))
' "$runs/steps20/train_log.jsonl" > "$out/train20-losses.txt"
  echo "golden: 20-step training losses"
  rm -rf "$runs"
}

compare() {
  python3 - "$1" "$2" <<'PY'
import csv, os, sys
a, b = sys.argv[1], sys.argv[2]
names = sorted(set(os.listdir(a)) | set(os.listdir(b)))
worst = 0.0
bad = []
for n in names:
    pa, pb = os.path.join(a, n), os.path.join(b, n)
    if not (os.path.isfile(pa) and os.path.isfile(pb)):
        bad.append(f"{n}: only in one folder"); continue
    if n.endswith(".txt"):
        ra = [l.split() for l in open(pa)]; rb = [l.split() for l in open(pb)]
        if len(ra) != len(rb): bad.append(f"{n}: {len(ra)} vs {len(rb)} lines"); continue
        d = max((abs(float(x) - float(y)) for la, lb in zip(ra, rb) for x, y in zip(la[1:], lb[1:])), default=0)
        print(f"{n:40s} {len(ra):7d} steps   max |diff| {d:.3g}"); worst = max(worst, d); continue
    ra = list(csv.DictReader(open(pa))); rb = list(csv.DictReader(open(pb)))
    if len(ra) != len(rb): bad.append(f"{n}: {len(ra)} vs {len(rb)} rows"); continue
    d = 0.0; flips = 0
    for x, y in zip(ra, rb):
        if (x["window"], x["position"], x["target"]) != (y["window"], y["position"], y["target"]):
            bad.append(f"{n}: rows differ in window/position/target"); break
        d = max(d, abs(float(x["loss"]) - float(y["loss"])))
        flips += x["correct"] != y["correct"]
    print(f"{n:40s} {len(ra):7d} tokens  max |loss diff| {d:.3g}  accuracy flips {flips}")
    worst = max(worst, d)
print(f"largest difference: {worst:.3g}")
for line in bad: print("MISMATCH:", line)
sys.exit(1 if bad else 0)
PY
}

case "${1:-}" in
  record) shift; record "$@" ;;
  compare) shift; compare "$@" ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
