#!/usr/bin/env bash
# stretch against llama.cpp, side by side on this machine, on the same GGUF files: prefill and
# decode tokens/s, peak memory, and decode as a share of the memory bandwidth. Random-weight models
# of real shapes, written by scripts/random_gguf.py (so no model is downloaded) and quantized by
# llama.cpp's own llama-quantize. Not run in CI (it builds llama.cpp).
#
#   bash scripts/vs_llamacpp.sh [--shape LIST] [--type LIST] [--rounds N] [--threads T]
#        [--llama DIR] [--stretch BIN] [--work DIR] [--kv TYPE] [--fa MODE] [--quick]
#
#   --shape LIST  comma list (default 15m,110m):
#                   15m   stories15M: dim 288, 6 layers, 6 heads, hidden 768, vocabulary 512
#                   110m  stories110M: dim 768, 12 layers, 12 heads, hidden 2048, vocabulary 512
#                   1b    Llama-3.2-1B: dim 2048, 16 layers, 32 heads, 8 kv heads, hidden 8192,
#                         Llama 3's vocabulary of 128,256, tied classifier (2.5 GB in BF16)
#                   8b    Llama-3.1-8B: dim 4096, 32 layers, 32 heads, 8 kv heads, hidden 14,336,
#                         Llama 3's vocabulary (16 GB in BF16, 4.9 GB in Q4_K_M)
#                 15m and 110m take the vocabulary of ../shared/models/stories260K/tok512.bin;
#                 1b and 8b Llama 3's tokenizer.json from data/vocab/llama3 (`bash
#                 scripts/setup.sh all` installs it).
#   --type LIST   the weights' type, comma list (default f32): f32, f16 and bf16 are written as
#                 such; any other is a llama-quantize type (q8_0, q4_k_m, q4_0, q6_k, ...) made
#                 from the BF16 file (from F32 for 15m and 110m). Both engines read the same file
#                 (stretch keeps its matrices as stored: --weights stored). The small shapes'
#                 rows (288, 768) are not whole K-quant blocks of 256, so llama-quantize falls
#                 back to other types for some tensors (Q5_0, which stretch does not read: such a
#                 case is reported as failed)
#   --rounds N    interleaved rounds (default 6): each round runs every case with llama.cpp, then
#                 with stretch, REPS=3 runs each (llama-bench -r 3 and its median; stretch bench
#                 --repeats 3 and its median), so both meet the same machine state; the medians of
#                 the rounds are printed. Flash attention: both modes in every round (--fa to
#                 choose one); llama.cpp's figure is the mode whose median over the rounds is higher
#   --fa MODE     llama.cpp's flash attention: both (default), off or on
#   --stretch BIN an already built stretch to measure (default: build/release/stretch, built by
#                 scripts/setup.sh stretch; with --stretch nothing is built or installed)
#   --llama DIR   llama.cpp's source (default ../llama.cpp); cloned from GitHub when missing (needs
#                 the network). Built once in DIR/build-stretch with GGML_NATIVE and OpenMP (or set
#                 LLAMA_BUILD to a build folder of yours that has the tools below)
#   --threads T   threads for both engines (default: all cores)
#   --work DIR    where the models go (default build/vs_llamacpp); files already there are reused
#   --kv TYPE     both engines' KV cache type: f32 (default, stretch's exact path), f16 or bf16
#   --cases LIST  only these cases, a comma list of their labels (prefill-512, decode-4096, ...)
#   --reps N      runs per measurement for both engines (default 3; an 8B prefill of 4,096
#                 tokens takes minutes a run on 2 cores)
#   --quick       one round, the 15m shape only (a smoke test of the script)
#
# Cases: 15m prefill of 512, 2048, 8192 tokens, decode (64 steps) from an empty context and
# after 2048; 110m the same without 8192; 1b and 8b prefill of 512 and 4096, decode from 0 and
# 4096. llama.cpp runs them with llama-bench (-p L -n 0; -n 64; -d D -n 64) where that
# llama-bench can, otherwise with llama-batched-bench; stretch with `stretch bench --case prefill`
# and `--case decode`. Memory: each engine's peak resident memory in its decode case at the
# deepest depth (stretch's from its bench process, llama.cpp's from the operating system's
# accounting of the llama-bench process), beside the file's size plus the KV cache at that depth.
# Bandwidth: `stretch bench --case memory` measures reading memory (GB/s) right before each of
# stretch's decode runs, in every round (a shared host's bandwidth drifts by a factor of two
# within a day); decode's share in a round is tokens/s x the matrices' bytes per token (the
# file's own, from stretch bench) / the rate read just before it, and the table gives the median
# share over the rounds with its range.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LLAMA=$ROOT/../llama.cpp
ROUNDS=6
THREADS=$(nproc)
WORK=$ROOT/build/vs_llamacpp
SHAPES=15m,110m
TYPES=f32
KV=f32
FA=both
STRETCH=""
REPS=3  # runs per measurement, both engines: llama-bench's -r, stretch bench's --repeats
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --llama) LLAMA=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --shape) SHAPES=$2; shift 2 ;;
    --type) TYPES=$2; shift 2 ;;
    --quick) SHAPES=15m; ROUNDS=1; shift ;;
    --cases) ONLY=",$2,"; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --kv) KV=$2; shift 2 ;;
    --fa) FA=$2; shift 2 ;;
    --stretch) STRETCH=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "vs_llamacpp: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
SHAPES=${SHAPES//,/ }
TYPES=${TYPES//,/ }
for s in $SHAPES; do
  case "$s" in 15m|110m|1b|8b) ;; *) echo "vs_llamacpp: --shape $s: expected 15m, 110m, 1b or 8b" >&2; exit 2 ;; esac
done
for t in $TYPES; do
  [[ "$t" =~ ^[a-z0-9_]+$ ]] || { echo "vs_llamacpp: --type $t: expected f32, f16, bf16 or a llama-quantize type such as q4_k_m" >&2; exit 2; }
done
case "$FA" in both|off|on) ;; *) echo "vs_llamacpp: --fa $FA: expected both, off or on" >&2; exit 2 ;; esac
case "$KV" in f32|f16|bf16) ;; *) echo "vs_llamacpp: --kv $KV: expected f32, f16 or bf16" >&2; exit 2 ;; esac
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "vs_llamacpp: --reps $REPS: expected a whole number >= 1" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "vs_llamacpp: --rounds $ROUNDS: expected a whole number >= 1" >&2; exit 2; }
command -v python3 >/dev/null || { echo "vs_llamacpp: python3 is needed (apt install python3)" >&2; exit 1; }
TOK512=$ROOT/../shared/models/stories260K/tok512.bin
LLAMA3=$ROOT/data/vocab/llama3/tokenizer.json
for s in $SHAPES; do
  if [[ "$s" = 15m || "$s" = 110m ]] && [ ! -f "$TOK512" ]; then
    echo "vs_llamacpp: --shape $s needs $TOK512 (a llama2.c vocabulary of 512 tokens)" >&2; exit 1
  fi
  if [[ "$s" = 1b || "$s" = 8b ]] && [ ! -f "$LLAMA3" ]; then
    echo "vs_llamacpp: --shape $s needs Llama 3's vocabulary, $LLAMA3: \`bash scripts/setup.sh all\` installs it" >&2; exit 1
  fi
done

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
# The checkout's commit, for the lines that name llama.cpp; a snapshot without git says so (its
# own .git only: inside another repository, git -C would give that one's commit).
llama_commit() {
  { [ -e "$LLAMA/.git" ] && git -C "$LLAMA" rev-parse --short HEAD 2>/dev/null; } ||
    echo "of unknown commit (not a git checkout)"
}
LB=${LLAMA_BUILD:-$LLAMA/build-stretch}  # LLAMA_BUILD: an existing build folder to reuse
if [ ! -x "$LB/bin/llama-bench" ] || [ ! -x "$LB/bin/llama-batched-bench" ] ||
   [ ! -x "$LB/bin/llama-quantize" ]; then
  echo "vs_llamacpp: building llama.cpp ($(llama_commit)) in $LB"
  cmake -S "$LLAMA" -B "$LB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
  cmake --build "$LB" -j "$(nproc)" --target llama-bench llama-batched-bench llama-quantize
fi

# ---- the models ----
mkdir -p "$WORK"
# Absolute: llama-quantize takes an argument that parses as a number (a name such as
# "1b-q8_0.gguf" starts with one) for its type, so every path given to it starts with "/".
WORK=$(cd "$WORK" && pwd)
shape_args() {  # shape -> random_gguf.py's shape flags
  case "$1" in
    15m) echo "--dim 288 --hidden 768 --layers 6 --heads 6" ;;
    110m) echo "--dim 768 --hidden 2048 --layers 12 --heads 12" ;;
    1b) echo "--dim 2048 --hidden 8192 --layers 16 --heads 32 --kv-heads 8 --rope-base 500000 --tied" ;;
    8b) echo "--dim 4096 --hidden 14336 --layers 32 --heads 32 --kv-heads 8 --rope-base 500000" ;;
  esac
}
vocab_file() {  # shape -> a GGUF file holding the shape's vocabulary (written once)
  local name src flags
  case "$1" in
    15m|110m) name=tok512; src=$TOK512; flags="--vocab 512" ;;
    *) name=llama3; src=$LLAMA3; flags="--vocab 128256" ;;
  esac
  if [ ! -f "$WORK/vocab-$name.gguf" ]; then
    # a tiny random model that only carries the vocabulary into GGUF, as stretch writes it
    python3 scripts/random_llama2c.py --dim 64 --hidden 64 --layers 1 --heads 2 $flags \
      --seq-len 16 --out "$WORK/vocab-$name.bin"
    "$STRETCH" convert -m "$WORK/vocab-$name.bin" -t "$src" --to gguf --out "$WORK/vocab-$name.gguf" >/dev/null
    rm -f "$WORK/vocab-$name.bin"
  fi
  echo "$WORK/vocab-$name.gguf"
}
model_file() {  # shape type -> the GGUF file (written or quantized once)
  local shape=$1 type=$2 f=$WORK/$1-$2.gguf base
  if [ ! -f "$f" ]; then
    case "$type" in
      f32|f16|bf16)
        # shellcheck disable=SC2046
        python3 scripts/random_gguf.py $(shape_args "$shape") --type "$type" \
          --vocab-from "$(vocab_file "$shape")" --name "random-$shape" --out "$f" >&2 ;;
      *)
        case "$shape" in 15m|110m) base=f32 ;; *) base=bf16 ;; esac
        base=$(model_file "$shape" "$base")
        "$LB/bin/llama-quantize" "$base" "$f.partial" "$(echo "$type" | tr a-z A-Z)" >"$f.quantize.log" 2>&1 ||
          { echo "vs_llamacpp: llama-quantize to $type failed, see $f.quantize.log" >&2; exit 1; }
        mv "$f.partial" "$f" ;;
    esac
  fi
  echo "$f"
}

# ---- one measurement each ----
# Each engine's output is read whole before python3 parses it: in a pipeline python3 would start
# beside the engine and take one of the cores while it runs.
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
bench_ts() {  # llama-bench's JSON -> the median of its runs' tokens/s (its mean if it lists none)
  python3 -c "import json,statistics,sys; r=json.load(sys.stdin)[0]; print(statistics.median(r['samples_ts']) if r.get('samples_ts') else r['avg_ts'])"
}
# Runs a command and writes its peak resident memory (bytes) to $PEAK_FILE when that is set.
PEAK_FILE=""
peak_run() {
  if [ -z "$PEAK_FILE" ]; then "$@"; return; fi
  python3 -c 'import resource,subprocess,sys
p = subprocess.run(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(p.returncode)' "$PEAK_FILE" "$@"
}
llama_bench() {  # gguf fa args...: one llama-bench run, its whole JSON output
  local g=$1 fa=$2 out
  shift 2
  out=$(peak_run "$LB/bin/llama-bench" -m "$g" -t "$THREADS" -fa "$fa" -ctk "$KV" -ctv "$KV" -r "$REPS" -o json "$@" 2>/dev/null) || return
  printf '%s\n' "$out"
}
llama_bench_ts() {  # gguf fa args...: one llama-bench run -> the median of its runs' tokens/s
  local out
  out=$(llama_bench "$@") || return
  bench_ts <<<"$out"
}
# llama-batched-bench's flash-attention switch: `-fa on|off` since mid 2025, a bare `-fa` before.
FA_VALUE=0
BB_HELP=$("$LB/bin/llama-batched-bench" -h 2>&1 || true)  # read whole: grep -q would SIGPIPE it
grep -q -- '--flash-attn \[on|off' <<<"$BB_HELP" && FA_VALUE=1
batched() {  # gguf fa pp tg field: REPS llama-batched-bench runs, one sequence: their median
  local fa=()
  if [ "$FA_VALUE" = 1 ]; then
    fa=(-fa "$([ "$2" = 1 ] && echo on || echo off)")
  elif [ "$2" = 1 ]; then
    fa=(-fa)
  fi
  # Its result line goes through llama.cpp's logger thread, which at d32676d sometimes exits
  # before printing it (about one run in five here, exit status 0): such a run is repeated.
  local out="" values=() rep
  for rep in $(seq 1 "$REPS"); do
    for _ in 1 2 3 4 5; do
      out=$(peak_run "$LB/bin/llama-batched-bench" -m "$1" -c $(($3 + $4)) -npp "$3" -ntg "$4" -npl 1 \
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
stretch_case() {  # kind gguf L -> its bench JSON line
  "$STRETCH" bench --case "$1" --model "$2" --length "$3" --repeats "$REPS" --threads "$THREADS" \
    --cache-type "$KV"
}

cases() {  # shape -> "label kind L" lines (those --cases names)
  # (an if, not `a || b && echo`: a loop whose last case is left out would end with a failed test,
  # and under pipefail the caller's substitution with it, which stopped the script silently)
  all_cases "$1" | while read -r label kind L; do
    if [ -z "$ONLY" ] || [[ "$ONLY" == *",$label,"* ]]; then echo "$label $kind $L"; fi
  done
}
all_cases() {
  case "$1" in
    15m) printf '%s\n' "prefill-512 prefill 512" "prefill-2048 prefill 2048" "prefill-8192 prefill 8192" \
      "decode-0 decode 0" "decode-2048 decode 2048" ;;
    110m) printf '%s\n' "prefill-512 prefill 512" "prefill-2048 prefill 2048" "decode-0 decode 0" \
      "decode-2048 decode 2048" ;;
    *) printf '%s\n' "prefill-512 prefill 512" "prefill-4096 prefill 4096" "decode-0 decode 0" \
      "decode-4096 decode 4096" ;;
  esac
}
deepest() { cases "$1" | awk '$2 == "decode" {d = $3} END {print d}'; }

# Every file first (writing an 8B model takes minutes), then what this llama.cpp can do.
FILES=()
for shape in $SHAPES; do
  for type in $TYPES; do
    FILES+=("$shape $type $(model_file "$shape" "$type")")
  done
done
PROBE=$(model_file "$(echo "$SHAPES" | awk '{print $1}')" "$(echo "$TYPES" | awk '{print $1}')")

# llama-bench takes no f32 KV cache (-ctk f32: early 2025, and still at d32676d of August 2026)
# and had no decode depth (-d) before mid 2025; then llama-batched-bench measures those cases
# (S_PP with -npp L -ntg 1, S_TG with -npp D -ntg 64). A CPU flash attention that aborts on the
# KV cache's type (early 2025 with f32) leaves the off figures only.
TOOL=batched
llama_bench "$PROBE" 0 -p 16 -n 0 >/dev/null && TOOL=bench
DEPTH=0
[ "$TOOL" = bench ] && llama_bench "$PROBE" 0 -p 0 -n 4 -d 16 >/dev/null && DEPTH=1
FA_MODES="0"
if [ "$FA" != off ]; then
  for _ in 1 2 3; do  # a failed probe is retried (see batched above)
    if llama_case "$PROBE" prefill 64 1 >/dev/null 2>&1; then FA_MODES="0 1"; break; fi
  done
  [ "$FA" = on ] && FA_MODES=${FA_MODES#0 }
fi
# The binary's own commit (`stretch --version`), not the checkout's: --stretch may name an older
# build. One without --version (before 2026-12-07) says so.
STRETCH_ID=$("$STRETCH" --version 2>/dev/null) || STRETCH_ID="a build without --version"
echo "vs_llamacpp: llama.cpp $(llama_commit):" \
  "prefill and decode from empty by llama-$([ "$TOOL" = bench ] && echo bench || echo batched-bench)," \
  "decode at depth by llama-$([ "$DEPTH" = 1 ] && echo bench || echo batched-bench)," \
  "flash attention $(case "$FA_MODES" in 0) echo "off only" ;; 1) echo "on only" ;; *) echo "off and on" ;; esac)," \
  "KV cache $KV; $STRETCH: $STRETCH_ID"
READ_GBS=$("$STRETCH" bench --case memory --threads "$THREADS" | json_field read_gbs)
echo "vs_llamacpp: memory read at $READ_GBS GB/s (stretch bench --case memory, $THREADS threads)"

# round, model, case, engine, tokens/s, peak bytes, bytes per token, memory read just before (GB/s)
RESULTS=$WORK/results.tsv
: >"$RESULTS"
echo "vs_llamacpp: $ROUNDS interleaved rounds, $THREADS threads; raw figures in $RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  for f in "${FILES[@]}"; do
    read -r shape type gguf <<<"$f"
    deep=$(deepest "$shape")
    while read -r label kind L; do
      for fa in $FA_MODES; do
        PEAK_FILE=""
        [ "$kind" = decode ] && [ "$L" = "$deep" ] && PEAK_FILE=$WORK/peak.txt && rm -f "$PEAK_FILE"
        v=$(llama_case "$gguf" "$kind" "$L" "$fa") || v=nan
        peak=$([ -n "$PEAK_FILE" ] && [ -f "$PEAK_FILE" ] && cat "$PEAK_FILE" || echo 0)
        printf '%s\t%s\t%s\t%s\t%s\t%s\t0\t0\n' "$r" "$shape-$type" "$label" "llama.cpp-fa$fa" "$v" "$peak" >>"$RESULTS"
      done
      PEAK_FILE=""
      deep_case=$([ "$kind" = decode ] && [ "$L" = "$deep" ] && echo 1 || echo 0)
      probe=0  # the memory read right before a decode, for its share of the bandwidth
      [ "$kind" = decode ] &&
        probe=$("$STRETCH" bench --case memory --threads "$THREADS" | json_field read_gbs)
      if ! out=$(stretch_case "$kind" "$gguf" "$L" 2>"$WORK/stretch.err"); then
        echo "vs_llamacpp: stretch failed on $shape-$type $label: $(tail -1 "$WORK/stretch.err")" >&2
        printf '%s\t%s\t%s\t%s\tnan\t0\t0\t0\n' "$r" "$shape-$type" "$label" stretch >>"$RESULTS"
        continue
      fi
      python3 -c "import json,sys; j=json.loads(sys.argv[3].strip().splitlines()[-1]); print('\t'.join(sys.argv[4:] + [str(j['tokens_per_s']), str(j['peak_rss_bytes'] if sys.argv[1] == '1' else 0), str(j.get('weight_bytes_per_token', 0)), sys.argv[2]]))" \
        "$deep_case" "$probe" "$out" "$r" "$shape-$type" "$label" stretch >>"$RESULTS"
    done < <(cases "$shape")
  done
  echo "vs_llamacpp: round $r of $ROUNDS done"
done

# File sizes and KV cache bytes at each model's deepest decode, for the memory table.
SIZES=$WORK/sizes.tsv
: >"$SIZES"
for f in "${FILES[@]}"; do
  read -r shape type gguf <<<"$f"
  deep=$(deepest "$shape")
  [ -n "$deep" ] || continue  # no decode case measured
  printf '%s\t%s\t%s\t%s\n' "$shape-$type" "$(stat -L -c %s "$gguf")" "$deep" \
    "$("$STRETCH" inspect -m "$gguf" --cache-type "$KV" --ctx $((deep + 64)) 2>/dev/null |
       awk '/KV cache/ {print $(NF-1), $NF; exit}')" >>"$SIZES"
done

python3 - "$RESULTS" "$SIZES" "$ROUNDS" "$THREADS" "$READ_GBS" "$KV" <<'PYEOF'
import collections, math, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
sizes = {l.split("\t")[0]: l.rstrip("\n").split("\t")[1:] for l in open(sys.argv[2]) if l.strip()}
rounds, threads, read_gbs, kv = sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6]
v = collections.defaultdict(list)
peak = collections.defaultdict(list)
share = collections.defaultdict(list)  # decode's share of the memory read just before it, a round
bpt = {}
order = []
for r, model, label, engine, x, pk, b, probe in rows:
    if x != "nan":
        v[(model, label, engine)].append(float(x))
        if float(b) > 0 and float(probe) > 0:
            share[(model, label)].append(float(x) * float(b) / 1e9 / float(probe))
    if int(pk) > 0:
        peak[(model, engine)].append(int(pk))
    if float(b) > 0:
        bpt[(model, label)] = float(b)
    if (model, label) not in order:
        order.append((model, label))
med = lambda k: statistics.median(v[k]) if v.get(k) else None
print(f"\nmedians of {rounds} interleaved rounds, {threads} threads, KV cache {kv}, tokens/s; llama.cpp's")
print("figure is its flash-attention mode with the higher median (both modes' medians beside it);")
print(f"decode's bandwidth: tokens/s x the file's matrix bytes per token; its share: of the memory read")
print(f"just before each decode run (stretch bench --case memory; {read_gbs:.1f} GB/s at the start), the")
print("median share over the rounds and its range")
print("| model | case | llama.cpp (fa off / on) | stretch | stretch / llama.cpp | stretch's decode bandwidth |")
print("| --- | --- | --- | --- | --- | --- |")
for model, label in order:
    modes = [m for m in ("llama.cpp-fa0", "llama.cpp-fa1") if v.get((model, label, m))]
    s = med((model, label, "stretch"))
    bw = ""
    if label.startswith("decode") and s and (model, label) in bpt:
        gbs = s * bpt[(model, label)] / 1e9
        sh = share.get((model, label))
        bw = f"{gbs:.1f} GB/s" + (
            f", {100 * statistics.median(sh):.0f}% ({100 * min(sh):.0f}-{100 * max(sh):.0f}%)"
            if sh else "")
    st = "failed" if s is None else f"{s:,.1f}"
    if not modes:
        print(f"| {model} | {label} | failed | {st} | - | {bw} |")
        continue
    win = max(modes, key=lambda m: med((model, label, m)))
    best = med((model, label, win))
    both = " / ".join("-" if med((model, label, m)) is None else f"{med((model, label, m)):,.1f}"
                      for m in ("llama.cpp-fa0", "llama.cpp-fa1"))
    ratio = f"{s / best:.2f}" if s else "-"
    print(f"| {model} | {label} | {best:,.1f} ({both}) | {st} | {ratio} | {bw} |")
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
print("\npeak resident memory in the deepest decode case (median over rounds), against the file's size")
print("plus the KV cache at that depth (+64 decoded tokens)")
print("| model | depth | file + KV cache | stretch | llama.cpp (fa off / on) | stretch / (file + KV) |")
print("| --- | --- | --- | --- | --- | --- |")
for model, (size, depth, kvtext) in sizes.items():
    kvb = 0
    if kvtext:
        n, u = kvtext.split()
        kvb = float(n) * units.get(u, 1)
    base = int(size) + kvb
    sp = statistics.median(peak[(model, "stretch")]) if peak.get((model, "stretch")) else 0
    lp = [statistics.median(peak[(model, m)]) / 2**30 if peak.get((model, m)) else None
          for m in ("llama.cpp-fa0", "llama.cpp-fa1")]
    lps = " / ".join("-" if x is None else f"{x:.2f} GiB" for x in lp)
    sps, ratio = (f"{sp / 2**30:.2f} GiB", f"{sp / base:.2f}") if sp and kvb else ("-", "-")
    print(f"| {model} | {depth} | {base / 2**30:.2f} GiB | {sps} | {lps} | {ratio} |")
PYEOF
