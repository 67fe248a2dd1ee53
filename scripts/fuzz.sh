#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ and runs each of them.
#
#   scripts/fuzz.sh [SECONDS]             every target SECONDS (default 600), two at a time
#   scripts/fuzz.sh --ci [SECONDS]        the same for CI (default 30 s each): a fresh corpus
#   scripts/fuzz.sh --only a,b [SECONDS]  only these targets (names of fuzz/targets/*.cc)
#   scripts/fuzz.sh --build-only          configure and build, make the seeds, run nothing
#   scripts/fuzz.sh --build DIR ...       use the build folder DIR instead of build/fuzz: one
#                                         configured with -DSTRETCH_FUZZ=ON, such as the test
#                                         suite's sanitizer build (scripts/setup.sh all), whose
#                                         parser layers carry the coverage instrumentation
#
# The build (build/fuzz): clang++-14, the libraries with -fsanitize=fuzzer-no-link,address,
# undefined (coverage for the fuzzer, every access and UB checked), the targets linked with
# -fsanitize=fuzzer (libFuzzer's main). The corpus of each target grows in
# build/fuzz/corpus/<target>/ from run to run, from the seeds: the committed text seeds
# (fuzz/seeds/<target>/), the binary seeds fuzz_make_seeds writes with the project's own writers
# (build/fuzz/seeds/<target>/) and the regressions (fuzz/regressions/<target>/).
# A crash (or sanitizer report, failed check, exception other than stretch::Error, malloc beyond
# -rss_limit_mb, input slower than -timeout) leaves its input in build/fuzz/artifacts/<target>/;
# the script then exits 1. Reproduce one with build/fuzz/fuzz_<target> <file>; once fixed, copy
# the file into fuzz/regressions/<target>/, where the replay test (tests/cli/fuzz_replay_test.cc)
# runs it in every build.
# Environment: JOBS (compile jobs, default 2), PARALLEL (targets at a time, default 2),
# CXX_FUZZ (default clang++-14).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=600
B=build/fuzz
CI=0
ONLY=""
BUILD_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) CI=1; SECONDS_EACH=30 ;;
    --only) ONLY="$2"; shift ;;
    --build-only) BUILD_ONLY=1 ;;
    --build) B="${2:?fuzz.sh: --build needs a folder}"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *[!0-9]*|"") echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    *) SECONDS_EACH="$1" ;;
  esac
  shift
done

JOBS="${JOBS:-2}"
PARALLEL="${PARALLEL:-2}"
CXX_FUZZ="${CXX_FUZZ:-clang++-14}"

echo "== fuzz: build ($B, $CXX_FUZZ) =="
if [ -f "$B/CMakeCache.txt" ] && ! grep -q '^STRETCH_FUZZ:BOOL=ON' "$B/CMakeCache.txt"; then
  echo "fuzz.sh: $B was configured without -DSTRETCH_FUZZ=ON: reconfigure it with it, or pass" \
    "another --build folder" >&2
  exit 2
fi
if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DCMAKE_BUILD_TYPE=Debug \
    -DSTRETCH_SANITIZE=ON -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DSTRETCH_FUZZ=ON \
    -DSTRETCH_BUILD_TESTS=OFF -DSTRETCH_BUILD_BENCH=OFF >/dev/null
fi
TIMEFORMAT="fuzz: build took %R s (%U s user + %S s system CPU)"
time cmake --build "$B" -j "$JOBS" --target fuzz_all

rm -rf "$B/seeds"
"$B/fuzz_make_seeds" "$B/seeds"

mapfile -t TARGETS < "$B/fuzz_targets.txt"
if [ -n "$ONLY" ]; then
  IFS=, read -r -a TARGETS <<< "$ONLY"
fi
[ "$BUILD_ONLY" = 1 ] && exit 0

# Scratch files of the targets (fuzz/fuzz_target.h ScratchDir) in memory, removed at the end.
SCRATCH=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/stretch-fuzz.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# The longest input worth trying: twice the largest seed (the model seeds are a few KB), at least
# 1 KB; a longer input only slows the fuzzer down.
max_len() {
  local largest
  largest=$(find "fuzz/seeds/$1" "$B/seeds/$1" -type f -printf '%s\n' 2>/dev/null | sort -n | tail -1)
  largest=${largest:-0}
  echo $(( largest * 2 > 1024 ? largest * 2 : 1024 ))
}

run_one() {  # run_one TARGET: fuzzes it for SECONDS_EACH seconds; its log in $B/logs/
  local t="$1"
  local corpus="$B/corpus/$t"
  [ "$CI" = 1 ] && rm -rf "$corpus"
  mkdir -p "$corpus" "$B/artifacts/$t" "$B/logs" "$SCRATCH/$t"
  local dirs=("$corpus")
  for d in "$B/seeds/$t" "fuzz/seeds/$t" "fuzz/regressions/$t"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  # -timeout: an input that takes 10 s is a hang (the seeds take milliseconds);
  # -rss_limit_mb (and the malloc limit it implies): a count from the file that was not bounded.
  TMPDIR="$SCRATCH/$t" "$B/fuzz_$t" -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$B/artifacts/$t/" "${dirs[@]}" > "$B/logs/$t.log" 2>&1 || true
}

# Artifacts of earlier runs stay until removed; only those of this run count.
STAMP="$SCRATCH/start"
touch "$STAMP"
echo "== fuzz: ${#TARGETS[@]} targets, ${SECONDS_EACH} s each, $PARALLEL at a time =="
running=0
for t in "${TARGETS[@]}"; do
  [ -x "$B/fuzz_$t" ] || { echo "fuzz.sh: no target '$t' (fuzz/targets/$t.cc)" >&2; exit 2; }
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
printf '%-20s %10s %8s %8s  %s\n' target "exec/s" corpus crashes result
for t in "${TARGETS[@]}"; do
  log="$B/logs/$t.log"
  execs=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  corpus=$(find "$B/corpus/$t" -type f | wc -l)
  crashes=$(find "$B/artifacts/$t" -type f -newer "$STAMP" ! -name 'slow-unit-*' | wc -l)
  result=ok
  if [ "$crashes" -gt 0 ]; then
    result="CRASH: $(find "$B/artifacts/$t" -type f -newer "$STAMP" ! -name 'slow-unit-*' | head -3 | tr '\n' ' ')"
    status=1
  elif ! grep -q 'Done [0-9]* runs' "$log"; then
    result="did not finish: see $log"
    status=1
  fi
  printf '%-20s %10s %8s %8s  %s\n' "$t" "${execs:-?}" "$corpus" "$crashes" "$result"
done
[ "$status" = 0 ] || echo "fuzz: findings above; each input reproduces with $B/fuzz_<target> <file>" >&2
exit "$status"
