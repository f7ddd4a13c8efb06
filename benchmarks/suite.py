"""The GPU suite: tune every problem below within a time budget, then bench it (autotuner.analysis.bench: torch eager,
torch.compile, manual, default and tuned Triton, interleaved on the same inputs), and print one markdown table.

    python benchmarks/suite.py [--ops matmul,attention] [--budget-s 25] [--compile-mode max-autotune]
                               [--db URL] [--json-out FILE] [--extra "matmul 512x4096x14336 bfloat16,..."]

`--extra` adds problems of its own (op, shape and dtype each) after the suite's: problems the suite does not name,
as a held-out check of what was tuned on it.

Results go to the database like any tuning run (`autotuner report` plots them). torch.compile runs in
`--compile-mode` (max-autotune by default: Inductor searches its own Triton templates against cuBLAS, which takes
tens of seconds per matmul shape), so split the matmul problems over device calls with `--match`. Memory-bound
problems are also set against a copy of as many bytes (the rate a transfer of that size reaches) beside the
1 GiB copy's roofline; attention against SDPA's default choice and its flash backend. Targets (issue 30): matmul
>= 1.00x cuBLAS in geometric mean, none below 0.95x; attention >= 1.00x SDPA; softmax >= 90% of copy.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.analysis.bench import COPY, DEFAULT, TUNED, BenchRow, bench, compute_bound  # noqa: E402
from autotuner.base.device import current_device  # noqa: E402
from autotuner.base.registry import get_op  # noqa: E402
from autotuner.base.settings import Settings  # noqa: E402
from autotuner.engine.tuner import Plan, tune  # noqa: E402
from autotuner.store.database import Store  # noqa: E402

SUITE: list[tuple[str, str, str, dict[str, object]]] = [
    ("matmul", "4096x4096x4096", "float16", {}),
    ("matmul", "8192x8192x8192", "bfloat16", {}),
    ("matmul", "32x4096x4096", "float16", {}),
    ("matmul", "1024x1024x1024", "float16", {}),
    ("matmul", "4096x4096x4096", "float16", {"epilogue": "bias_gelu"}),
    # shapes of real models (issue 30): a non-power-of-two square, Llama-2-7B's MLP, Llama-3-8B's MLP and its fused
    # QKV projection at 3000 tokens, one decode step of a 70B-class layer
    ("matmul", "4000x4000x4000", "float16", {}),
    ("matmul", "2048x11008x4096", "bfloat16", {}),
    ("matmul", "4096x14336x4096", "bfloat16", {}),
    ("matmul", "3000x6144x4096", "bfloat16", {}),
    ("matmul", "16x8192x8192", "float16", {}),
    ("matmul", "64x4096x14336", "bfloat16", {}),  # Llama-3-8B's MLP down projection, a decode step of 64 sequences
    # skinny M and K-heavy (issue 70): a 256-token chunk through Llama-3-8B's fused gate and up projection; a
    # reduction four times deeper than either output side, where split-K and stream-K kernels earn their place
    ("matmul", "256x28672x4096", "bfloat16", {}),
    ("matmul", "1024x1024x16384", "float16", {}),
    ("softmax", "4096x4096", "float16", {}),
    ("softmax", "16384x1024", "float16", {}),
    ("softmax", "1024x32768", "float32", {}),
    ("softmax", "1024x32768", "float16", {}),  # few long rows: 8 per SM
    ("softmax", "1024x32768", "bfloat16", {}),
    ("softmax", "65536x256", "float16", {}),
    ("softmax", "8192x2048", "bfloat16", {}),
    ("softmax", "2048x16384", "float16", {}),
    ("softmax", "32768x1000", "float16", {}),  # attention scores over 1000 keys: rows not a multiple of 16
    ("softmax", "32x128256", "bfloat16", {}),  # sampling: 32 sequences' logits over Llama-3's vocabulary
    ("softmax", "8x151936", "float32", {}),  # 8 sequences' float32 logits over Qwen2's vocabulary
    ("layernorm", "4096x4096", "float16", {}),
    ("layernorm", "16384x1024", "bfloat16", {}),
    ("layernorm", "4096x5120", "bfloat16", {}),  # a 5120-wide hidden state: two tiles, 4096 + 1024
    ("gelu", "4096x4096", "float16", {}),
    ("gelu", "16777216", "float32", {}),
    ("attention", "4x32x2048x128", "float16", {"causal": True}),
    ("attention", "4x32x2048x128", "float16", {"causal": False}),
    ("attention", "1x16x8192x64", "bfloat16", {"causal": True}),
    ("attention", "8x16x4096x64", "bfloat16", {"causal": False}),
    # grouped-query heads (issue 49): Llama-3-8B's (32 query heads over 8 key/value heads, head_dim 128), and 4 to 1
    ("attention", "4x32x8x2048x128", "bfloat16", {"causal": True}),
    ("attention", "8x16x4x4096x64", "bfloat16", {"causal": False}),
]


def _ms(row: BenchRow) -> str:
    return f"{row.ms:.4f}" if row.ms else "-"


def _row(rows: dict[str, dict[str, Any]], name: str) -> BenchRow:
    """A record's row back as a BenchRow; an empty one (no time) where the candidate is missing."""
    return BenchRow(**rows[name]) if name in rows else BenchRow(name, None)


def _extra_problem(item: str) -> tuple[str, str, str, dict[str, object]]:
    """An `--extra` item, 'op shape dtype', as a SUITE entry."""
    words = item.split()
    if len(words) != 3:
        sys.exit(f"--extra takes 'op shape dtype' items, comma-separated; got {item!r}")
    return words[0], words[1], words[2], {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="matmul,softmax,layernorm,gelu,attention")
    ap.add_argument("--match", default="",
                    help="comma-separated substrings of 'op key' (e.g. 'softmax,matmul 1024x'); a problem runs "
                         "when its op is in --ops and, if given, one substring matches")
    ap.add_argument("--budget-s", type=float, default=25.0, help="tuning time per problem (search only)")
    ap.add_argument("--trials", type=int, default=None, help="cap on configs measured per problem")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out (saves its compile time)")
    ap.add_argument("--compile-mode", default="max-autotune", help="torch.compile's mode ('default': its default)")
    ap.add_argument("--db", default=None)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--extra", default="", help="more problems, comma-separated 'op shape dtype' items")
    args = ap.parse_args()
    ops = args.ops.split(",")
    settings = Settings(db_url=args.db) if args.db else Settings()
    store = Store(settings.db_url)
    device = current_device()
    t0 = time.perf_counter()
    records = []
    wanted = [m for m in args.match.split(",") if m]
    extra = [_extra_problem(item) for item in args.extra.split(",") if item.strip()]
    for op_name, shape, dtype, options in [p for p in SUITE if p[0] in ops] + extra:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype, **options)
        if wanted and (op_name, shape, dtype, options) not in extra and not any(
                m in f"{op_name} {problem.key}" for m in wanted):
            continue
        t_tune = time.perf_counter()
        search = tune(op, problem, store=store, settings=settings,
                      plan=Plan(time_budget_s=args.budget_s, trials=args.trials))
        tune_s = time.perf_counter() - t_tune
        result = bench(op, problem, device, store=store, rounds=args.rounds, use_compile=not args.no_compile,
                       compile_mode=None if args.compile_mode == "default" else args.compile_mode)
        records.append({"problem": f"{op_name} {problem.key}", "tune_s": tune_s, "trials": len(search.trials),
                        "candidates": search.candidates, "compute_bound": compute_bound(op, problem),
                        **result.to_dict()})
        print(f"[{time.perf_counter() - t0:6.1f} s] {op_name} {problem.key}: tuned in {tune_s:.1f} s "
              f"({len(search.trials)} of {search.candidates} configs)", file=sys.stderr, flush=True)
        if args.json_out:
            args.json_out.write_text(json.dumps({"device": device.key, "records": records}, default=str, indent=1))

    compile_label = f"torch.compile ({args.compile_mode})"
    print(f"\n{device.key}; times in ms (median of {args.rounds} interleaved rounds, L2 flushed), "
          "roofline = measured floor (1 GiB copy, matmul peak) / time; copy = a copy of as many bytes as the problem "
          "moves, timed in the same rounds; (k/n): rounds in which tuned beat eager; "
          "'= default': the tuner kept the default config\n")
    print(f"| problem | torch eager | {compile_label} | other torch | Triton default | Triton tuned "
          "| tuned vs eager | tuned vs compile | tuned vs default | tuned rate | roofline | of same-bytes copy "
          "| tuning | tuned config |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios: dict[str, dict[str, list[float]]] = {}

    def keep(op_name: str, what: str, value: float | None) -> str:
        if value:
            ratios.setdefault(op_name, {}).setdefault(what, []).append(value)
        return f"{value:.2f}x" if value else "-"

    for rec in records:
        rows = {r["name"]: r for r in rec["rows"]}
        eager, comp, default, tuned, copy = (_row(rows, name) for name in (
            "torch eager", "torch.compile", DEFAULT, TUNED, COPY))
        others = [_row(rows, name) for name in rows if name not in (
            "torch eager", "torch.compile", DEFAULT, TUNED, COPY)]
        op_name = rec["op"]
        compute = rec["compute_bound"]
        rate = (f"{tuned.tflops:.0f} TFLOP/s" if compute else f"{tuned.gbs:.0f} GB/s") if tuned.ms else "-"
        vs_eager = eager.ms / tuned.ms if tuned.ms and eager.ms else None
        vs_default = default.ms / tuned.ms if tuned.ms and default.ms else None
        vs_default_text = ("= default" if rec["tuned_config"] == rec["default_config"]  # timed once: 1.00x
                           else f"{vs_default:.2f}x" if vs_default else "-")
        other_text = "; ".join(f"{o.name} {_ms(o)}" + (f" (tuned {o.ms / tuned.ms:.2f}x)" if o.ms and tuned.ms else "")
                               for o in others) or "-"
        for o in others:
            if o.ms and tuned.ms:
                keep(op_name, f"vs {o.name}", o.ms / tuned.ms)
        n_rounds = rec["rounds"]
        eager_text = keep(op_name, "vs torch eager", vs_eager)
        compile_text = keep(op_name, f"vs {compile_label}", comp.ms / tuned.ms if comp.ms and tuned.ms else None)
        copy_frac = copy.ms / tuned.ms if copy.ms and tuned.ms else None
        if copy_frac:
            ratios.setdefault(op_name, {}).setdefault("of same-bytes copy", []).append(copy_frac)
        print(f"| {rec['problem']} | {_ms(eager)} | {_ms(comp)} | {other_text} | {_ms(default)} | {_ms(tuned)} "
              f"| {f'{eager_text} ({tuned.rounds_faster}/{n_rounds})' if vs_eager else '-'} | {compile_text} "
              f"| {vs_default_text} | {rate} | {f'{tuned.roofline:.0%}' if tuned.ms and tuned.roofline else '-'} "
              f"| {f'{copy_frac:.0%}' if copy_frac else '-'} | {rec['tune_s']:.0f} s, {rec['trials']} of "
              f"{rec['candidates']} | {rec['tuned_config']} |")
    print()
    for op_name, per in ratios.items():
        for what, rs in per.items():
            gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
            print(f"- {op_name}: tuned Triton {what}, geometric mean over {len(rs)} problems: {gm:.3f}x "
                  f"(lowest {min(rs):.3f}x)")
    if records and records[0].get("peaks"):
        p = records[0]["peaks"]
        print(f"- measured ceilings: copy {p['copy_gbs']:.0f} GB/s; matmul " +
              ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in p["matmul_tflops"].items()))
    print(f"- whole suite: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
