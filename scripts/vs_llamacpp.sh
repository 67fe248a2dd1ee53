#!/usr/bin/env bash
# stretch against llama.cpp, side by side on this machine: prefill and decode tokens/s of
# random-weight models of the stories15M shape (dim 288, 6 layers, 6 heads, hidden 768) and the
# stories110M shape (dim 768, 12 layers, 12 heads, hidden 2048), both with a 512-token vocabulary,
# f32 weights and an f32 KV cache, the same threads for both. Not run in CI (it builds llama.cpp).
#
#   bash scripts/vs_llamacpp.sh [--llama DIR] [--rounds N] [--threads T] [--work DIR] [--quick]
#
#   --llama DIR   llama.cpp's source (default ../llama.cpp). When DIR is missing it is cloned from
#                 https://github.com/ggml-org/llama.cpp (needs the network; pass a checkout
#                 otherwise). Built in DIR/build-stretch with GGML_NATIVE (AVX-512 where the CPU
#                 has it) and OpenMP, once (or set LLAMA_BUILD to a build folder of yours).
#   --rounds N    interleaved rounds (default 6): each round runs every case with llama.cpp, then
#                 with stretch, 3 runs each (each engine's median of its 3 is the round's
#                 figure), so both meet the same machine state; the medians of the rounds are
#                 printed. Flash attention: both modes in every round (--fa to choose one), and
#                 llama.cpp's figure is the mode whose median over the rounds is the higher
#   --fa MODE     llama.cpp's flash attention: both (default), off or on (at 8192 tokens on the
#                 CPU one mode can be 10x slower than the other: choosing one saves time)
#   --stretch BIN an already built stretch to measure (default: build/release/stretch, built by
#                 scripts/setup.sh, which also installs the corpus; with --stretch nothing is
#                 built or installed for stretch)
#   --threads T   threads for both engines (default: all cores)
#   --work DIR    where the models go (default build/vs_llamacpp)
#   --quick       one round, the 15M shape only (a smoke test of the script)
#   --kv TYPE     llama.cpp's KV cache type (default f32, as stretch keeps it; f16 is llama.cpp's
#                 default and may be faster there)
#
# Models: scripts/random_llama2c.py writes the llama2.c checkpoints (deterministic, seed 1); llama.cpp's
# own converter (llama-convert-llama2c-to-ggml) turns them into GGUF with the 512-token vocabulary
# of ../shared/models/stories260K/tok512.bin. llama.cpp runs each case with flash attention off
# and on, and the faster of the two medians is its figure (as the comparison in issue 14 did).
# Both engines give each round the median of REPS runs: llama-bench's own samples (samples_ts),
# llama-batched-bench run REPS times, stretch bench --repeats REPS.
# Cases: prefill of 512, 2048 and 8192 tokens (8192 for 15M only), decode from an empty context
# and decode after 2048 tokens, 64 steps. llama.cpp runs them with llama-bench (-p L -n 0; -n 64;
# -d D -n 64) where that llama-bench can, otherwise with llama-batched-bench (see below); stretch
# with `stretch bench --case prefill` and `--case decode` (64 decode steps after a prefill of the
# depth).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LLAMA=$ROOT/../llama.cpp
ROUNDS=6
THREADS=$(nproc)
WORK=$ROOT/build/vs_llamacpp
QUICK=0
KV=f32
FA=both
STRETCH=""
REPS=3  # runs per measurement: llama-bench's -r (its mean) and stretch bench's --repeats (median)
while [ $# -gt 0 ]; do
  case "$1" in
    --llama) LLAMA=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --quick) QUICK=1; ROUNDS=1; shift ;;
    --kv) KV=$2; shift 2 ;;
    --fa) FA=$2; shift 2 ;;
    --stretch) STRETCH=$2; shift 2 ;;
    -h|--help) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vs_llamacpp: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
VOCAB=$ROOT/../shared/models/stories260K/tok512.bin
if [ ! -f "$VOCAB" ]; then
  echo "vs_llamacpp: $VOCAB not found: the GGUF conversion needs a llama2.c vocabulary of 512 tokens" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "vs_llamacpp: python3 is needed (apt install python3)" >&2; exit 1; }

case "$FA" in both|off|on) ;; *) echo "vs_llamacpp: --fa $FA: expected both, off or on" >&2; exit 2 ;; esac
if [ -n "$STRETCH" ]; then
  [ -x "$STRETCH" ] || { echo "vs_llamacpp: --stretch $STRETCH is not an executable file" >&2; exit 1; }
else
  bash scripts/setup.sh stretch
  STRETCH=$ROOT/build/release/stretch
fi

if [ ! -d "$LLAMA" ]; then
  echo "vs_llamacpp: cloning llama.cpp into $LLAMA"
  git clone --depth 1 https://github.com/ggml-org/llama.cpp "$LLAMA"
fi
LB=${LLAMA_BUILD:-$LLAMA/build-stretch}  # LLAMA_BUILD: an existing build folder to reuse
if [ ! -x "$LB/bin/llama-bench" ] || [ ! -x "$LB/bin/llama-batched-bench" ] ||
   [ ! -x "$LB/bin/llama-convert-llama2c-to-ggml" ]; then
  echo "vs_llamacpp: building llama.cpp ($(git -C "$LLAMA" rev-parse --short HEAD 2>/dev/null || echo '?')) in $LB"
  cmake -S "$LLAMA" -B "$LB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
  cmake --build "$LB" -j "$(nproc)" --target llama-bench llama-batched-bench \
    llama-convert-llama2c-to-ggml
fi

mkdir -p "$WORK"
make_model() {  # name dim hidden layers heads seq_len
  local name=$1
  if [ ! -f "$WORK/$name.bin" ]; then
    python3 scripts/random_llama2c.py --dim "$2" --hidden "$3" --layers "$4" --heads "$5" \
      --vocab 512 --seq-len "$6" --out "$WORK/$name.bin"
  fi
  if [ ! -f "$WORK/$name.gguf" ]; then
    "$LB/bin/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$VOCAB" \
      --llama2c-model "$WORK/$name.bin" --llama2c-output-model "$WORK/$name.gguf" >"$WORK/$name.convert.log" 2>&1 ||
      { echo "vs_llamacpp: conversion of $name failed, see $WORK/$name.convert.log" >&2; exit 1; }
  fi
}
make_model s15m 288 768 6 6 256
SHAPES="s15m"
if [ "$QUICK" = 0 ]; then
  make_model s110m 768 2048 12 12 1024
  SHAPES="s15m s110m"
fi

# One measurement: prints tokens/s. Each engine's output is read whole before python3 parses it:
# in a pipeline python3 would start beside the engine and take one of the cores while it runs
# (stretch's 15M decode from empty, 64 steps in about 30 ms a repeat, measured 860-1,390
# tokens/s piped into python3 and 2,350-3,050 alone).
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
bench_ts() {  # llama-bench's JSON -> the median of its runs' tokens/s (its mean if it lists none)
  python3 -c "import json,statistics,sys; r=json.load(sys.stdin)[0]; print(statistics.median(r['samples_ts']) if r.get('samples_ts') else r['avg_ts'])"
}
llama_bench() {  # gguf fa args...: one llama-bench run, its whole JSON output
  local g=$1 fa=$2 out
  shift 2
  out=$("$LB/bin/llama-bench" -m "$g" -t "$THREADS" -fa "$fa" -ctk "$KV" -ctv "$KV" -r "$REPS" -o json "$@" 2>/dev/null) || return
  printf '%s\n' "$out"
}
llama_bench_ts() {  # gguf fa args...: one llama-bench run -> its mean tokens/s
  local out
  out=$(llama_bench "$@") || return
  bench_ts <<<"$out"
}
# llama-batched-bench's flash-attention switch: `-fa on|off` since mid 2025, a bare `-fa` before.
FA_VALUE=0
# (The help is read whole first: grep -q would close the pipe early, and under pipefail the
# help's SIGPIPE would count as a failure.)
BB_HELP=$("$LB/bin/llama-batched-bench" -h 2>&1 || true)
grep -q -- '--flash-attn \[on|off' <<<"$BB_HELP" && FA_VALUE=1
batched() {  # gguf fa pp tg field: one llama-batched-bench run, one sequence, its own warm-up
  local fa=()
  if [ "$FA_VALUE" = 1 ]; then
    fa=(-fa "$([ "$2" = 1 ] && echo on || echo off)")
  elif [ "$2" = 1 ]; then
    fa=(-fa)
  fi
  # Its result line goes through llama.cpp's logger thread, which at d32676d sometimes exits
  # before printing it (about one run in five here, exit status 0): such a run is repeated.
  # REPS runs, as many as llama-bench's -r and stretch's --repeats: their median.
  local out="" values=() rep
  for rep in $(seq 1 "$REPS"); do
    for _ in 1 2 3 4 5; do
      out=$("$LB/bin/llama-batched-bench" -m "$1" -c $(($3 + $4)) -npp "$3" -ntg "$4" -npl 1 \
        -t "$THREADS" -ctk "$KV" -ctv "$KV" "${fa[@]}" --output-format jsonl 2>/dev/null |
        grep '^{' || true)
      [ -n "$out" ] && break
    done
    values+=("$(json_field "$5" <<<"$out")")
  done
  python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "${values[@]}"
}
llama_case() {  # gguf kind L fa -> tokens/s
  local g=$1 kind=$2 L=$3 fa=$4
  if [ "$kind" = prefill ]; then
    if [ "$TOOL" = bench ]; then llama_bench_ts "$g" "$fa" -p "$L" -n 0
    else batched "$g" "$fa" "$L" 1 speed_pp; fi
  elif [ "$L" = 0 ] && [ "$TOOL" = bench ]; then
    llama_bench_ts "$g" "$fa" -p 0 -n 64
  elif [ "$DEPTH" = 1 ]; then
    llama_bench_ts "$g" "$fa" -p 0 -n 64 -d "$L"
  else
    batched "$g" "$fa" "$((L > 0 ? L : 1))" 64 speed_tg  # from empty: one prompt token
  fi
}
stretch_case() {  # case bin L
  local out
  out=$("$STRETCH" bench --case "$1" --model "$2" --length "$3" --repeats "$REPS" --threads "$THREADS") || return
  json_field tokens_per_s <<<"$out"
}

cases() {  # shape -> "label kind L" lines
  if [ "$1" = s15m ]; then
    printf '%s\n' "prefill-512 prefill 512" "prefill-2048 prefill 2048" "prefill-8192 prefill 8192" \
      "decode-0 decode 0" "decode-2048 decode 2048"
  else
    printf '%s\n' "prefill-512 prefill 512" "prefill-2048 prefill 2048" "decode-0 decode 0" \
      "decode-2048 decode 2048"
  fi
}

# What this llama.cpp can do. llama-bench takes no f32 KV cache (-ctk f32: early 2025, and still
# at d32676d of August 2026) and had no decode depth (-d) before mid 2025; then
# llama-batched-bench measures those cases (S_PP with -npp L -ntg 1, S_TG with -npp D -ntg 64).
# Its CPU flash attention of early 2025 aborts on an f32 KV cache ("fattn: unsupported K-type");
# then only the off figures count.
TOOL=batched
llama_bench "$WORK/s15m.gguf" 0 -p 16 -n 0 >/dev/null && TOOL=bench
DEPTH=0
[ "$TOOL" = bench ] && llama_bench "$WORK/s15m.gguf" 0 -p 0 -n 4 -d 16 >/dev/null && DEPTH=1
FA_MODES="0"
if [ "$FA" != off ]; then
  for _ in 1 2 3; do  # a failed probe is retried (see batched above)
    if llama_case "$WORK/s15m.gguf" prefill 64 1 >/dev/null 2>&1; then FA_MODES="0 1"; break; fi
  done
  [ "$FA" = on ] && FA_MODES=${FA_MODES#0 }
fi
echo "vs_llamacpp: llama.cpp $(git -C "$LLAMA" rev-parse --short HEAD 2>/dev/null || echo '?'):" \
  "prefill and decode from empty by llama-$([ "$TOOL" = bench ] && echo bench || echo batched-bench)," \
  "decode at depth by llama-$([ "$DEPTH" = 1 ] && echo bench || echo batched-bench)," \
  "flash attention $([ "$FA_MODES" = 0 ] && echo "off only (it aborts with a $KV KV cache)" || echo "off and on")," \
  "KV cache $KV"

RESULTS=$WORK/results.tsv
: >"$RESULTS"
echo "vs_llamacpp: $ROUNDS interleaved rounds, $THREADS threads; raw figures in $RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  for shape in $SHAPES; do
    while read -r label kind L; do
      for fa in $FA_MODES; do
        v=$(llama_case "$WORK/$shape.gguf" "$kind" "$L" "$fa")
        printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$shape" "$label" "llama.cpp-fa$fa" "$v" >>"$RESULTS"
      done
      v=$(stretch_case "$kind" "$WORK/$shape.bin" "$L")
      printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$shape" "$label" stretch "$v" >>"$RESULTS"
    done < <(cases "$shape")
  done
  echo "vs_llamacpp: round $r of $ROUNDS done"
done

python3 - "$RESULTS" "$ROUNDS" "$THREADS" <<'EOF'
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
v = collections.defaultdict(list)
first = {}
order = []
for r, shape, label, engine, x in rows:
    v[(shape, label, engine)].append(float(x))
    if r == "1":
        first[(shape, label, engine)] = float(x)
    if (shape, label) not in order:
        order.append((shape, label))
print(f"\nmedians of {sys.argv[2]} interleaved rounds, {sys.argv[3]} threads, tokens/s; llama.cpp's")
print("figure is its flash-attention mode with the higher median (both modes' medians beside it)")
print("| case | llama.cpp (fa off / on) | stretch | stretch / llama.cpp |")
print("| --- | --- | --- | --- |")
def med(k):
    return statistics.median(v[k]) if k in v else None
for shape, label in order:
    modes = [m for m in ("llama.cpp-fa0", "llama.cpp-fa1") if (shape, label, m) in v]
    win = max(modes, key=lambda m: med((shape, label, m)))
    best = med((shape, label, win))
    off, on = med((shape, label, "llama.cpp-fa0")), med((shape, label, "llama.cpp-fa1"))
    both = " / ".join("-" if x is None else f"{x:,.0f}" for x in (off, on))
    s = med((shape, label, "stretch"))
    print(f"| {shape} {label} | {best:,.0f} ({both}) | {s:,.0f} | {s / best:.2f} |")
EOF
