#!/usr/bin/env bash
# The test suite, as CI runs it (.ci/run):
#   1. the layout check (clang-format);
#   2. every libFuzzer target of fuzz/ for 15 seconds from its seeds (scripts/fuzz.sh --ci), in
#      the sanitizer build (clang, build/debug-asan);
#   3. every test under AddressSanitizer + UBSan, in that build (CTest's counts come last).
# Tests that need ../shared (real models and corpora) skip with a message when it is missing.
#
#   bash scripts/test.sh            the above (12-20 minutes on 2 cores from a fresh clone)
#   bash scripts/test.sh --release  also builds build/release (g++, -O2 -march=native) and runs the
#                                   whole suite there: the optimized program users run, and the
#                                   longer variants of the real-model tests that the sanitizer
#                                   build shortens or skips (its -O1 code checked access by access
#                                   runs them several times slower). About 12 minutes more.
#
# CI runs the first form: both suites and the fuzzers did not fit in its 20 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
RELEASE=0
case "${1:-}" in
  "") ;;
  --release) RELEASE=1 ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "test.sh: unknown argument '$1' (expected --release or nothing; see --help)" >&2; exit 2 ;;
esac
bash scripts/setup.sh deps
# The layout check first: a formatting slip fails in seconds, not after a build.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "== format: clang-format --dry-run -Werror (.clang-format) =="
  git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror
  echo "format: every C++ file is laid out as .clang-format says"
fi
bash scripts/setup.sh sanitize
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One test process per core: the tests share no files (each has its own temporary directory) and
# time nothing, and the thread pool does not stall when a core is busy (src/core/threads.h).
JOBS=$(nproc)
echo "== fuzz: every target 15 s (scripts/fuzz.sh --ci) =="
# 15 s each (19 targets, two at a time: about 2.5 minutes) keeps a fresh-clone run inside CI's
# 20 minutes: at 30 s each it took 19-21 minutes in the last runs. Longer runs: scripts/fuzz.sh.
# The options scripts/fuzz.sh gives the fuzzers on its own (the suite's abort_on_error is left out).
ASAN_OPTIONS=detect_leaks=1 bash scripts/fuzz.sh --ci --build build/debug-asan 15
echo "== tests: Debug + AddressSanitizer + UndefinedBehaviorSanitizer =="
ctest --test-dir build/debug-asan --output-on-failure -j "$JOBS"
if [ "$RELEASE" = 1 ]; then
  bash scripts/setup.sh release
  echo "== tests: Release =="
  ctest --test-dir build/release --output-on-failure -j "$JOBS"
fi
