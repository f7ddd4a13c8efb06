#!/usr/bin/env bash
# One device call of the GPU suite (benchmarks/suite.py): OPS picks the part, BUDGET_S the tuning seconds per
# problem, MATCH (optional) substrings of the problems to keep, EXTRA (optional) problems of its own ('op shape
# dtype', comma-separated). Installs the carried wheels, then tunes and benches each problem; the markdown table is
# printed last. Logs, the suite's JSON and the SQLite database (for `autotuner report`) go to $OUT.
#   OPS=matmul,attention BUDGET_S=30 bash benchmarks/gpu_suite.sh
#   OPS=softmax,layernorm,gelu BUDGET_S=20 PROFILE=1 bash benchmarks/gpu_suite.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 AUTOTUNER_DB_URL=sqlite:///$OUT/suite.db
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
timeout "${SUITE_TIMEOUT_S:-540}" python3 benchmarks/suite.py --ops "${OPS:-matmul,attention}" --budget-s "${BUDGET_S:-15}" --match "${MATCH:-}" \
    --rounds "${ROUNDS:-5}" ${NO_COMPILE:+--no-compile} --compile-mode "${COMPILE_MODE:-max-autotune}" --json-out "$OUT/suite.json" --extra "${EXTRA:-}" > "$OUT/suite.md" 2> "$OUT/suite.log"
echo "suite exit $?"
tail -n 4 "$OUT/suite.log"
if [ "${PROFILE:-0}" = 1 ]; then
  python3 -m autotuner bench softmax --shape 4096x4096 --no-compile --rounds 2 --profile > "$OUT/bench_profile.txt" 2>&1
  tail -n 22 "$OUT/bench_profile.txt"
fi
cat "$OUT/suite.md"
if [ -n "${THEN:-}" ]; then echo "== $THEN"; eval "$THEN" 2>&1 | tail -n 14; fi
