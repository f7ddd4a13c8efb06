#!/usr/bin/env bash
# Device call for the launch-overhead table: tune softmax 1024x1024 float16, then time the library call
# against the same kernel with its config in code and a @triton.autotune copy.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
DB=sqlite:////tmp/overhead.db
python3 -m autotuner tune softmax --shape 1024x1024 --trials 40 --db $DB 2>&1 | tee "$OUT/tune_softmax.log"
python3 benchmarks/launch_overhead.py --db $DB 2>&1 | tee "$OUT/overhead.txt"
