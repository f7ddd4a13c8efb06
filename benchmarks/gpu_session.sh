#!/usr/bin/env bash
# One device call: install carried wheels, run the GPU test tier, tune matmul 4096 end to end, and measure
# what the compile pool saves. Logs go to $OUT; a short summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 AUTOTUNER_DB_URL=sqlite:////tmp/gpu.db
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"

step() { echo "== $1"; }
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step "GPU tier"
  python3 -m pytest tests/gpu -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/gpu_tier.log" | tail -25
fi

if [ "${SKIP_TUNE:-0}" != 1 ]; then
  step "autotuner tune matmul --M 4096"
  /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul --M 4096 2>&1 | tee "$OUT/tune_4096.log"
  python3 -m autotuner tune matmul --M 4096 --json > "$OUT/tune_4096_again.json" 2>/dev/null
fi

if [ "${COMPILE_POOL:-1}" = 1 ]; then
  step "compile pool: 32 trials of matmul 2048, cold Triton cache, 1 vs default workers"
  for w in 1 0; do
    export TRITON_CACHE_DIR=/tmp/tcache_$w
    s=$(date +%s.%N)
    AUTOTUNER_COMPILE_WORKERS=$w python3 -m autotuner tune matmul --M 2048 --trials 32 --db sqlite:////tmp/pool_$w.db --json > "$OUT/pool_$w.json" 2>&1
    e=$(date +%s.%N)
    echo "compile_workers=$w (0 = auto): $(python3 -c "print(f'{$e-$s:.1f}')") s" | tee -a "$OUT/pool.txt"
  done
  unset TRITON_CACHE_DIR
fi

if [ "${EXHAUSTIVE:-0}" = 1 ]; then
  step "exhaustive matmul 4096"
  /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul --M 4096 --strategy exhaustive --trials 1000 \
      --db sqlite:////tmp/exh.db 2>&1 | tee "$OUT/exhaustive_4096.log"
fi
cp /tmp/gpu.db "$OUT/" 2>/dev/null
echo "== summary"; cat "$OUT/device.txt"; tail -1 "$OUT/gpu_tier.log" 2>/dev/null; cat "$OUT/pool.txt" 2>/dev/null
