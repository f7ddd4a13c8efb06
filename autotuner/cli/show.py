"""`autotuner show`: the config a problem launches with on this device, and where it comes from."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from autotuner.base.registry import library_of
from autotuner.cli.common import (
    DbOpt,
    DtypeOpt,
    JsonOpt,
    OpArg,
    ShapeOpt,
    command,
    console,
    fail,
    ms,
    print_json,
    problem,
    problem_options,
    settings,
    times,
)
from search_spaces.contract import ProblemType

if TYPE_CHECKING:
    from autotuner.store.resolution import Source


@problem_options
@command
def show(
    op: OpArg,
    shape: ShapeOpt = None,
    flags: dict[str, str | None] | None = None,
    dtype: DtypeOpt = None,
    options: dict[str, Any] | None = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    explain: bool = typer.Option(False, "--explain", help="show which lookup step answers a launch, and why"),
) -> None:
    """The stored config for a problem on this device: the exact tuned result, else the nearest tuned
    problem's (as GET /config answers), else the space default. Exits 1 when nothing tuned applies."""
    from autotuner.base.device import current_device
    from autotuner.launch.serving import answer_config
    from autotuner.store import open_store
    from autotuner.store.errors import NoStore as NoDatabase
    from autotuner.store.resolution import TORCH_MARGIN, Source

    s = settings(db)
    if dtype is None:
        dtype = _tuned_dtype(op, shape, flags or {}, options or {}, s)
    op_obj, prob = problem(op, shape, dtype, flags or {}, options or {})
    device = current_device()
    if explain:
        if _explain(op_obj, prob, device, s, as_json) == Source.DEFAULT:
            raise typer.Exit(1)  # as without --explain: nothing tuned applies
        return
    try:
        store = open_store(s.db_url, create=False)
    except NoDatabase as exc:
        info: dict[str, Any] = {"op": op, "problem": prob.key, "device": device.key, "source": "default",
                                "config": op_obj.space.default(prob, device), "reason": str(exc)}
        _print(info, as_json, "the space default: nothing tuned can be read")
        raise typer.Exit(1) from None
    a = answer_config(store, op_obj, prob, device, fallback="nearest")
    info = {"op": op, "library": library_of(op), "problem": prob.key, "device": device.key, "source": a.source,
            "config": a.config,
            "from_problem": a.from_problem, "timing_problem": a.timing_problem, "median_ms": a.median_ms,
            "default_ms": a.default_ms, "torch_ms": a.torch_ms, "speedup_vs_default": a.speedup_vs_default,
            "stale": a.stale, "stale_reason": a.stale_reason,
            "tuned_at": str(a.tuned_at) if a.tuned_at else None, "result_id": a.result_id,
            "expected_regret": a.expected_regret, "regret_measured_on": list(a.regret_measured_on) or None,
            "regret_basis": a.regret_basis, "launches_torch": a.launches_torch}
    summary = Source(a.source).summary(prob.key, device.key, a.from_problem, a.stale_reason if a.stale else None,
                                       a.regret_basis)
    if a.launches_torch:
        summary += (f"; its tune timed torch's op more than {TORCH_MARGIN:.0%} faster than this config, so the "
                    "library call launches torch's op instead")
    _print(info, as_json, summary)
    if a.source == Source.DEFAULT:
        raise typer.Exit(1)


def _tuned_dtype(op: str, shape: str | None, flags: dict[str, str | None], options: dict[str, Any],
                 s: Any) -> str | None:
    """With no --dtype: the dtype this shape (else the op) was tuned in (launch.serving.tuned_dtype); several name
    themselves in an error; none leaves the op's default."""
    from autotuner.launch.serving import NoSuchProblem, tuned_dtype
    from autotuner.store import open_store
    from autotuner.store.errors import NoStore as NoDatabase

    op_obj, prob = problem(op, shape, None, flags, options)
    try:
        store = open_store(s.db_url, create=False)
    except NoDatabase:
        return None
    try:
        return tuned_dtype(store, op_obj, prob.shape, {k: v for k, v in options.items() if v is not None},
                           "give one with --dtype", builtin=True)
    except NoSuchProblem as exc:
        fail(exc.message)


def _print(info: dict[str, Any], as_json: bool, summary: str) -> None:
    if as_json:
        print_json(info)
        return
    table = Table(title=f"{info['op']} {info['problem']} on {info['device']}")
    table.add_column("")
    table.add_column("value")
    for k, v in info.items():
        if k not in ("op", "problem", "device") and v is not None:
            value = f"{ms(v)} (on {info.get('timing_problem')})" if k.endswith("_ms") else \
                times(v) if k.startswith("speedup") else \
                f"{v:+.1%} against this problem's own winner, expected" \
                if k == "expected_regret" else ", ".join(v) if isinstance(v, list) else v
            table.add_row(k, json.dumps(value) if isinstance(value, dict) else str(value))
    console.print(table)
    console.print(summary, soft_wrap=True)


def _explain(op: Any, prob: ProblemType, device: Any, s: Any, as_json: bool) -> Source:
    """Print which lookup step answers a launch, and why; returns its source."""
    from autotuner.launch.lookup import Resolver
    from autotuner.store.resolution import STEPS

    res = Resolver(s).resolve(op, prob, device)
    if as_json:
        print_json({"op": op.name, "problem": prob.key, "device": device.key, "config": res.config,
                    "source": res.source, "step": res.step, "reason": res.reason, "from_problem": res.from_problem,
                    "trace": res.trace})
        return res.source
    console.print(Text.assemble((f"{op.name} {prob.key}", "bold"), f" on {device.key}: a launch with no config uses"))
    console.print(f"  {json.dumps(res.config)}")
    console.print(Text.assemble("  source ", (str(res.source), "bold"),
                                f", answered by the {res.step} step: {res.reason}"))
    console.print("Steps, in order: " + "; ".join(f"{step.name} ({step.does})" for step in STEPS))
    console.print("What each said:")
    for line in res.trace:
        console.print(f"  - {line}")
    return res.source
