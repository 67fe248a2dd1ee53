#!/usr/bin/env bash
# Runs the whole test suite twice: under AddressSanitizer + UBSan (Debug) and optimized (Release).
# Tests that need ../shared (real models and corpora) skip with a message when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh deps
# The layout check first: a formatting slip fails in seconds, not after two builds.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "== format: clang-format --dry-run -Werror (.clang-format) =="
  git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror
  echo "format: every C++ file is laid out as .clang-format says"
fi
bash scripts/setup.sh all
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# One test process per core: the tests share no files (each has its own temporary directory) and
# time nothing, and the thread pool does not stall when a core is busy (src/core/threads.h).
JOBS=$(nproc)
echo "== tests: Debug + AddressSanitizer + UndefinedBehaviorSanitizer =="
ctest --test-dir build/debug-asan --output-on-failure -j "$JOBS"
echo "== tests: Release =="
ctest --test-dir build/release --output-on-failure -j "$JOBS"
