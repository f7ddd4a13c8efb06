#!/usr/bin/env bash
# One device call: install the carried wheels, then the steps named in STEPS (default: tier,overhead):
#   tier       the GPU test tier (tests/gpu, or the pytest arguments in TIER_ARGS)
#   overhead   benchmarks/launch_overhead.py: CPU cost per call of the library calls and decorated kernels
#              (OVERHEAD_ARGS: more arguments, e.g. --rounds 15); then an older tree's, where OVERHEAD_TREE names an
#              ignored folder holding `git archive <commit>`'s files; OVERHEAD_PAIRS times, alternating (a host's
#              speed drifts between processes: each pair's rows compare, and each row against torch's op)
#   peers      benchmarks/peers.py: autotuner, triton.autotune and Inductor max-autotune tuning a matmul, each in new
#              processes with cold caches, warm ones and (autotuner) compiles from another host (PEERS_ARGS)
#   generated  benchmarks/generated.py: Helion kernels and a max-autotune block, alone and under autotuner: a first
#              process, a second, and a new host on the same database (GENERATED_ARGS; Helion from .whl/helion)
#   dropin     benchmarks/autotune_drop_in.py: @autotuner.autotune against @triton.autotune on the examples,
#              with a profile of each warm first launch in $OUT/profiles (DROPIN_ARGS: more arguments)
#   tune       `autotuner tune matmul --M 4096`, cold Triton cache, with its phases (TUNE_RUNS times, default 1),
#              after the start-up's parts: import torch, CUDA init, importing the CLI
#   share      `autotuner tune matmul --M 4096` as three fresh hosts (a Triton cache and kept-binaries folder each):
#              without AUTOTUNER_COMPILE_SECRET, then with it twice on one database (the second loads the first's
#              compiles), each with its wall time and phases
#   ab         benchmarks/tune_ab.py: cold `autotuner tune` of an older tree (AB_TREE: an ignored folder holding
#              `git archive <commit>`'s files, carried) and this one, interleaved (AB_TUNE: the tune's arguments,
#              default "matmul --M 4096"; AB_ARGS: more options, e.g. --share --drop-caches --rounds 2)
#   tunetime   benchmarks/tune_time.py: that, the same through a running worker, an exhaustive run (a landscape)
#              and the winners against its best (TUNETIME_ARGS: more arguments, e.g. --no-exhaustive)
#   fill       benchmarks/bytecode_fill.py: a host's first command, when its bytecode fill ended, and the next
#              command (FILL_ARGS: more arguments, e.g. --rounds 3)
#   kinds      benchmarks/matmul_kinds.py: the matmul kernel's kinds on one tile against cuBLAS
#   attkinds   benchmarks/attention_kinds.py: the attention kernel with and without its persistent grid, against SDPA
#   landscapes exhaustive runs of softmax and layernorm problems (LANDSCAPES: "op shape dtype" items separated by
#              commas), written as landscapes to $OUT/landscapes, then replayed with the repository's
#   scale      benchmarks/scale_workers.py: 16 jobs drained by workers on 1 and on every GPU of the host, a worker
#              per GPU and one worker holding them all (SCALE_ARGS: more arguments)
#   dynamic    benchmarks/dynamic_shapes.py: library-style kernels swept, then a serving stream with one worker
#              beside it (regret over time), and triton.autotune on the same stream (DYNAMIC_ARGS: more arguments)
#   refine     benchmarks/refine_regret.py: three library-style kernels' landscapes over M, and the regret on
#              held-back keys after a pow2 sweep and after it refined itself (REFINE_ARGS: more arguments)
#   sweep      `autotuner tune matmul --M 1-8192:pow2 --N 4096 --K 4096`, refined (SWEEP_ARGS: more arguments;
#              SWEEP_M: another range of M), cold Triton cache, with its wall time and worst neighbouring loss
#   libraries  benchmarks/libraries.py: real libraries' autotuned kernels (wheels carried in .whl/libs:
#              liger-kernel 0.8.5, fla-core 0.6.0 with einops 0.8.2, flag-gems 5.0.2 with PyYAML 6.0.3; the Triton
#              tutorial's fused attention in .whl/tutorial) under `python -m autotuner run` against Triton's own
#              (LIB_WORKLOADS: which; LIB_ARGS: more arguments, e.g. --train for the training-like loops); then, where LIB_TESTS_DIR names a library's test folder (carried: liger-kernel
#              0.8.5's sdist tests in .whl/liger_tests), the tests in LIB_TESTS with and without the switch.
#              None of .whl is committed: the wheels come from `pip download --no-deps --only-binary=:all:
#              --python-version 3.12 -d .whl/libs NAME==VERSION`; .whl/liger_tests holds test/{__init__,conftest,
#              utils}.py and test/transformers/test_{dyt,grpo_loss}.py from `pip download --no-binary=:all:
#              liger_kernel==0.8.5`, whose test/utils.py imports transformers: .whl/libs/testdeps holds transformers
#              4.57.1 and its dependencies but numpy (`pip download --only-binary=:all: --python-version 3.12`);
#              .whl/tutorial/fused_attention.py is python/tutorials/06-fused-attention.py of triton-lang/triton at
#              003da478, its TMA forward (with configs, keep_tma, _tma_pre_hook) and backward kept as they are
# Logs and JSON go to $OUT, packed into $OUT/out.tgz at the end; each step's table is printed at its end.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
# autotuner's own metadata as an install leaves it (its requirements, which a command's bytecode fill reads:
# autotuner.base.bytecode); its packages come from the tree, first on PYTHONPATH
python3 benchmarks/dist_info.py /tmp/site || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
STEPS=",${STEPS:-tier,overhead},"
# What comes back from $OUT is counted in files: at the end (or when stopped by a timeout's SIGTERM) everything but
# device.txt goes into one archive, out.tgz (a call with several steps lost the files past the count before).
pack() {
  trap - EXIT TERM
  (cd "$OUT" && find . -type f ! -name device.txt ! -name out.tgz -print0 | tar czf out.tgz --null -T - --remove-files)
}
trap pack EXIT
trap 'pack; exit 143' TERM
step() { echo "== $1"; }
if [[ $STEPS == *,tier,* ]]; then
  step "GPU tier"
  python3 -m pytest ${TIER_ARGS:-tests/gpu} -q -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/gpu_tier.log" | tail -30
fi
if [[ $STEPS == *,overhead,* ]]; then
  for pair in $(seq 1 "${OVERHEAD_PAIRS:-1}"); do
    suffix=$([ "$pair" = 1 ] && echo "" || echo "_$pair")
    step "launch overhead$suffix"
    python3 benchmarks/launch_overhead.py ${OVERHEAD_ARGS:-} --json-out "$OUT/overhead$suffix.json" 2>&1 \
        | tee "$OUT/overhead$suffix.txt" | tail -14
    if [ -n "${OVERHEAD_TREE:-}" ]; then  # an older tree's (an ignored folder holding `git archive <commit>`'s files)
      step "launch overhead, $OVERHEAD_TREE$suffix"
      (cd "$OVERHEAD_TREE" && PYTHONPATH=/tmp/site:$PWD python3 benchmarks/launch_overhead.py ${OVERHEAD_ARGS:-} \
          --json-out "$OUT/overhead_before$suffix.json" 2>&1 | tee "$OUT/overhead_before$suffix.txt" | tail -14)
    fi
  done
fi
if [[ $STEPS == *,fill,* ]]; then
  step "bytecode fill"
  python3 benchmarks/bytecode_fill.py ${FILL_ARGS:-} 2>&1 | tee "$OUT/bytecode_fill.txt" | tail -8
fi
if [[ $STEPS == *,peers,* ]]; then
  step "peers"
  python3 benchmarks/peers.py ${PEERS_ARGS:-} --json-out "$OUT/peers.json" 2>&1 | tee "$OUT/peers.txt" | tail -14
fi
if [[ $STEPS == *,generated,* ]]; then
  step "generated kernels: Helion and Inductor, kept and served"
  [ -d .whl/helion ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/helion/*.whl
  python3 benchmarks/generated.py ${GENERATED_ARGS:-} --json-out "$OUT/generated.json" 2>&1 | tee "$OUT/generated.txt" | tail -16
fi
if [[ $STEPS == *,dropin,* ]]; then
  step "autotune drop-in"
  mkdir -p "$OUT/profiles"
  python3 benchmarks/autotune_drop_in.py --json-out "$OUT/dropin.json" --profile-dir "$OUT/profiles" ${DROPIN_ARGS:-} 2>&1 | tee "$OUT/dropin.txt" | tail -40
fi
if [[ $STEPS == *,tune,* ]]; then
  step "start-up parts, then autotuner tune matmul --M 4096, cold Triton cache"
  python3 -c "import time; t=time.perf_counter(); import torch; a=time.perf_counter(); torch.cuda.init(); torch.empty(1, device='cuda'); b=time.perf_counter(); import triton, optuna, sqlalchemy; c=time.perf_counter(); print(f'import torch {a-t:.2f} s, CUDA context {b-a:.2f} s, triton+optuna+sqlalchemy {c-b:.2f} s')"
  python3 -X importtime -c "import autotuner.cli" 2> "$OUT/importtime.txt"; sort -t'|' -k2 -n "$OUT/importtime.txt" | tail -4
  for i in $(seq 1 "${TUNE_RUNS:-1}"); do
    export TRITON_CACHE_DIR=/tmp/tc_tune_$i
    /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul --M 4096 --db sqlite:////tmp/tune_$i.db --json \
        > "$OUT/tune_4096_$i.json" 2> "$OUT/tune_4096_$i.log"
    tail -1 "$OUT/tune_4096_$i.log"
    python3 -c "import json; r=json.load(open('$OUT/tune_4096_$i.json')); print('phases', {k: round(v, 2) for k, v in r['phases'].items()}, 'elapsed', round(r['elapsed_s'], 1), 'best', r['best_ms'], r['best_config'])"
  done
  unset TRITON_CACHE_DIR
fi
if [[ $STEPS == *,share,* ]]; then
  step "compiles shared between hosts: autotuner tune matmul --M 4096 on three fresh hosts"
  for h in alone first second; do
    secret=""; db=/tmp/share.db; [ "$h" = alone ] && db=/tmp/alone.db || secret=s3cret-of-16-bytes
    TRITON_CACHE_DIR=/tmp/tc_share_$h AUTOTUNER_KERNEL_CACHE_DIR=/tmp/kept_share_$h AUTOTUNER_COMPILE_SECRET=$secret \
        /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul --M ${SHARE_M:-4096} --db sqlite:///$db --json \
        > "$OUT/share_$h.json" 2> "$OUT/share_$h.log"
    echo "$h: $(tail -1 "$OUT/share_$h.log")"
    python3 -c "import json; r=json.load(open('$OUT/share_$h.json')); print('  phases', {k: round(v, 2) for k, v in r['phases'].items() if v >= 0.05}, 'best', r['best_ms'], r['best_config'])"
  done
  python3 -c "import sqlite3; c=sqlite3.connect('/tmp/share.db'); print('compiled files kept:', c.execute('select count(*), sum(length(data)) from compiled_files').fetchone())"
fi
if [[ $STEPS == *,ab,* ]]; then
  step "cold tune, $AB_TREE against this tree, interleaved"
  python3 benchmarks/tune_ab.py "$AB_TREE" . --tune "${AB_TUNE:-matmul --M 4096}" --out "$OUT" ${AB_ARGS:-} 2>&1 | tee "$OUT/tune_ab.txt" | tail -12
fi
if [[ $STEPS == *,tunetime,* ]]; then
  step "tune time, exhaustive landscape, winner against the best"
  python3 benchmarks/tune_time.py --out "$OUT" ${TUNETIME_ARGS:-} 2>&1 | tee "$OUT/tune_time.txt" | tail -8
fi
if [[ $STEPS == *,kinds,* ]]; then
  step "matmul kinds against cuBLAS"
  python3 benchmarks/matmul_kinds.py ${KINDS_ARGS:-} 2>&1 | tee "$OUT/kinds.txt" | tail -14
fi
if [[ $STEPS == *,attkinds,* ]]; then
  step "attention kinds against SDPA"
  python3 benchmarks/attention_kinds.py 2>&1 | tee "$OUT/attkinds.txt" | tail -7
fi
if [[ $STEPS == *,landscapes,* ]]; then
  step "landscapes: exhaustive softmax and layernorm"
  mkdir -p "$OUT/landscapes"
  export TRITON_CACHE_DIR=/tmp/tc_land
  IFS=, read -ra problems <<< "${LANDSCAPES:-softmax 4096x4096 float16,softmax 8192x1024 bfloat16,softmax 1024x32768 float16,layernorm 4096x4096 float16,layernorm 16384x1024 bfloat16}"
  for p in "${problems[@]}"; do
    set -- $p
    db=sqlite:////tmp/land_$1_$2_$3.db
    python3 -m autotuner tune "$1" --shape "$2" --dtype "$3" --strategy exhaustive --trials 100000 --db "$db" -q \
        > /dev/null 2>> "$OUT/landscapes.log" || { echo "failed: $p"; continue; }
    python3 -m autotuner export --format landscape --op "$1" --shape "$2" --dtype "$3" --db "$db" \
        -o "$OUT/landscapes/$1_$2_$3_$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -cd 'A-Za-z0-9 ' | tr A-Z a-z | awk '{print $2}').json"
  done
  python3 benchmarks/replay_efficiency.py "$OUT"/landscapes/*.json tests/data/landscapes/*.json --seeds 10 2>&1 | tee "$OUT/replay.txt"
fi
if [[ $STEPS == *,scale,* ]]; then
  step "scale: workers on 1 and on every GPU"
  n=$(nvidia-smi -L | wc -l); gpus=1; [ "$n" -gt 1 ] && gpus="1,$n"
  python3 benchmarks/scale_workers.py --gpus "$gpus" --out "$OUT" ${SCALE_ARGS:-} 2>&1 | tee "$OUT/scale.txt" | tail -12
fi
if [[ $STEPS == *,dynamic,* ]]; then
  step "a stream of shapes with one worker beside it: benchmarks/dynamic_shapes.py"
  python3 benchmarks/dynamic_shapes.py --out "$OUT" ${DYNAMIC_ARGS:-} 2>&1 | tee "$OUT/dynamic.txt" | tail -16
fi
if [[ $STEPS == *,refine,* ]]; then
  step "refined sweeps and the serving rule on held-back keys: benchmarks/refine_regret.py"
  python3 benchmarks/refine_regret.py --out "$OUT" ${REFINE_ARGS:-} 2>&1 | tee "$OUT/refine.txt" | tail -16
fi
if [[ $STEPS == *,sweep,* ]]; then
  step "autotuner tune matmul --M ${SWEEP_M:-1-8192:pow2} --N 4096 --K 4096 ${SWEEP_ARGS:-}, cold Triton cache"
  TRITON_CACHE_DIR=/tmp/tc_sweep /usr/bin/time -f "wall %e s" python3 -m autotuner tune matmul \
      --M "${SWEEP_M:-1-8192:pow2}" --N 4096 --K 4096 --db sqlite:////tmp/sweep.db --json ${SWEEP_ARGS:-} \
      > "$OUT/sweep.json" 2> "$OUT/sweep.log"
  tail -1 "$OUT/sweep.log"
  python3 -c "
import json; r = json.load(open('$OUT/sweep.json'))
print('points', len(r['points']), 'refined', r['refined'], 'tune', round(r['tune_s']), 's, cross-time',
      round(r['cross_time_s']), 's')
print('worst neighbouring loss', r['worst_loss'], 'between', r['worst_between'], 'within target', r['within_target'],
      'left', r['unrefined'], 'model', round(r.get('predict_s', 0), 1), 's')
for refined in (False, True):
    pts = [p for p in r['points'] if p['refined'] == refined]
    total = {}
    for p in pts:
        for k, v in p['phases'].items():
            total[k] = total.get(k, 0) + v
    print('refined' if refined else 'given', len(pts), 'points,', sum(p['trials'] for p in pts), 'trials:',
          {k: round(v, 1) for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:9]})"
fi
if [[ $STEPS == *,libraries,* ]]; then
  workloads=${LIB_WORKLOADS-liger_dyt,fla_gla,fla_l2norm,flag_gems_ops,tutorial_attention}
  step "real libraries under python -m autotuner run: $workloads ${LIB_TESTS_DIR:+; tests in $LIB_TESTS_DIR}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/libsite .whl/libs/*.whl || exit 1
  if [ -n "${LIB_TESTS_DIR:-}" ] && compgen -G ".whl/libs/testdeps/*.whl" >/dev/null; then  # what the tests import
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/libsite .whl/libs/testdeps/*.whl || exit 1
  fi
  PYTHONPATH=/tmp/libsite:$PYTHONPATH python3 benchmarks/libraries.py --keep /tmp/libraries --workloads "$workloads" \
      ${LIB_TESTS_DIR:+--tests-dir "$LIB_TESTS_DIR" --tests "${LIB_TESTS:-}" --tests-timeout "${LIB_TESTS_TIMEOUT:-900}"} --timeout "${LIB_TIMEOUT:-900}" ${LIB_PROFILE:+--profile} \
      ${LIB_ARGS:-} --json-out "$OUT/libraries.json" 2>&1 | tee "$OUT/libraries.txt" | tail -40
  (cd /tmp/libraries && find . \( -name '*.log' -o -name '*-report.json' -o -name '*.xml' \) -print0 \
      | tar czf "$OUT/libraries.tgz" --null -T -)  # one file: what comes back is counted in files
fi
