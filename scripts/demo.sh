#!/usr/bin/env bash
# The main job: set up (Debian packages, the default corpus, the Release build), then
# `stretch lab --quick`: train two small models at 128 tokens (a RoPE baseline and KeyNorm) on the
# State of the Union addresses before 2000, test them at 8x and 16x that length on the addresses
# from 2000 on with every training-free method, and print the table and the report's paths.
# Run it again to reuse what is done (the lab resumes); `rm -rf lab` starts over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh stretch
exec build/release/stretch lab --quick --out lab "$@"
