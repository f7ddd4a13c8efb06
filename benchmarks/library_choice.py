"""What a library call launches after a tune, and how fast: `autotuner.<call>` against torch's own op, on each
problem below. GPU only.

    python benchmarks/library_choice.py [--ops attention,matmul] [--budget-s 10] [--rounds 5] [--db URL]

Each problem is tuned into the database (a temporary SQLite file unless --db). Then, in interleaved rounds (CUDA
events, L2 flushed): torch's op (the op's baseline), the tuned kernel at its best config, and the library call
as a user makes it, which resolves through the same database and launches the tuned kernel, or torch's op where
the tune timed that faster by more than the margin (autotuner.store.resolution.Resolution.launches_torch). The
library call's output and the tuned kernel's are checked against the op's reference first (analysis.kinds).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBLEMS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("attention", "4x32x2048x128", "float16", {"causal": True}),
    ("attention", "4x32x2048x128", "float16", {"causal": False}),
    ("attention", "4x32x8x2048x128", "bfloat16", {"causal": True}),  # grouped-query heads
    ("attention", "2x16x8192x128", "bfloat16", {"causal": False}),
    ("attention", "8x16x4096x64", "bfloat16", {"causal": False}),
    ("attention", "1x16x8192x64", "bfloat16", {"causal": True}),
    ("matmul", "4096x4096x4096", "float16", {}),
    ("matmul", "32x4096x4096", "float16", {}),
    ("matmul", "2048x11008x4096", "bfloat16", {}),
    ("matmul", "4096x4096x4096", "float16", {"epilogue": "bias_gelu"}),
]


def _activation(epilogue: str | None) -> str | None:
    """matmul's library `activation` for an epilogue: none, bias -> None; relu, bias_relu -> relu; and gelu."""
    last = (epilogue or "none").split("_")[-1]
    return None if last in ("none", "bias") else last


CALLS: dict[str, Callable[[dict[str, Any]], Callable[[], Any]]] = {
    "attention": lambda i: functools.partial(_library("attention"), i["q"], i["k"], i["v"], causal=i["causal"]),
    "matmul": lambda i: functools.partial(_library("matmul"), i["a"], i["b"], i.get("bias"),
                                          activation=_activation(i.get("epilogue"))),
}


def _library(name: str) -> Callable[..., Any]:
    import autotuner

    return getattr(autotuner, name)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="attention,matmul")
    ap.add_argument("--budget-s", type=float, default=10.0, help="tuning time per problem (search only)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()

    from autotuner.analysis.kinds import checked_medians
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op
    from autotuner.base.settings import Settings
    from autotuner.engine.tuner import Plan, tune
    from autotuner.launch.lookup import Resolver, resolver, set_resolver
    from autotuner.store.database import Store
    from autotuner.store.resolution import TORCH_MARGIN

    db = args.db or f"sqlite:///{tempfile.mkdtemp(prefix='library-choice-')}/results.db"
    settings = Settings(db_url=db)
    store = Store(db)
    set_resolver(Resolver(settings))
    device = current_device()
    rows = []
    for op_name, shape, dtype, options in [p for p in PROBLEMS if p[0] in args.ops.split(",")]:
        op = get_op(op_name)
        problem = op.parse_problem(shape, dtype, **options)
        result = tune(op, problem, store=store, settings=settings, plan=Plan(time_budget_s=args.budget_s))
        inputs = op.make_inputs(problem, device.torch_device)
        library = CALLS[op_name](inputs)
        assert op.reference is not None and op.baseline is not None and result.best_config is not None
        check = op.check(library(), op.reference(inputs), problem)
        if not check.ok:
            raise SystemExit(f"{op_name} {problem.key}: the library call's output: {check.message}")
        ms = checked_medians(op, problem, device, inputs, {"kernel": result.best_config},
                             {"torch": functools.partial(op.baseline, inputs), "library": library}, args.rounds)
        # what the library call decided (as autotuner.launch.library does)
        torch_serves = resolver().resolve(op, problem, device).launches_torch and settings.torch_op
        rows.append((f"{op_name} {problem.key}", ms, "torch's op" if torch_serves else "kernel", result))
        print(f"{op_name} {problem.key}: {ms}", file=sys.stderr, flush=True)

    print(f"\n{device.key}; ms, medians of {args.rounds} interleaved rounds (CUDA events, L2 flushed); the tune's own "
          f"times decide: torch's op serves where it ran more than {TORCH_MARGIN:.0%} faster than the best config\n")
    print("| problem | tune: best / torch ms | torch's op | tuned kernel | kernel vs torch | library call | launches "
          "| library vs torch |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ms, launches, result in rows:
        print(f"| {name} | {result.best_ms:.4f} / {result.torch_ms:.4f} | {ms['torch']:.4f} | {ms['kernel']:.4f} "
              f"| {ms['torch'] / ms['kernel']:.3f}x | {ms['library']:.4f} | {launches} "
              f"| {ms['torch'] / ms['library']:.3f}x |")


if __name__ == "__main__":
    main()
