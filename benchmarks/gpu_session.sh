#!/usr/bin/env bash
# One device call: install the carried wheels, then the steps named in STEPS (default: tier,overhead):
#   tier       the GPU test tier (tests/gpu)
#   overhead   benchmarks/launch_overhead.py: CPU cost per call of the library calls and decorated kernels
#   dropin     benchmarks/autotune_drop_in.py: @autotuner.autotune against @triton.autotune on the examples
#   tune       `autotuner tune matmul --M 4096`, cold Triton cache, with its phases
# Logs and JSON go to $OUT; each step's table is printed at its end.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
STEPS=",${STEPS:-tier,overhead},"
step() { echo "== $1"; }
if [[ $STEPS == *,tier,* ]]; then
  step "GPU tier"
  python3 -m pytest tests/gpu -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/gpu_tier.log" | tail -30
fi
if [[ $STEPS == *,overhead,* ]]; then
  step "launch overhead"
  python3 benchmarks/launch_overhead.py --json-out "$OUT/overhead.json" 2>&1 | tee "$OUT/overhead.txt" | tail -14
fi
if [[ $STEPS == *,dropin,* ]]; then
  step "autotune drop-in"
  python3 benchmarks/autotune_drop_in.py --json-out "$OUT/dropin.json" 2>&1 | tee "$OUT/dropin.txt" | tail -22
fi
if [[ $STEPS == *,tune,* ]]; then
  step "autotuner tune matmul --M 4096, cold Triton cache"
  export TRITON_CACHE_DIR=/tmp/tc_tune
  /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul --M 4096 --db sqlite:////tmp/tune.db --json \
      > "$OUT/tune_4096.json" 2> "$OUT/tune_4096.log"
  tail -2 "$OUT/tune_4096.log"
  python3 -c "import json; r=json.load(open('$OUT/tune_4096.json')); print('phases', {k: round(v, 2) for k, v in r['phases'].items()}, 'elapsed', round(r['elapsed_s'], 1), 'best', r['best_ms'], r['best_config'])"
fi
