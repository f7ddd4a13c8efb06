"""The results pages, for people: server-rendered HTML (Jinja2, every value escaped), read-only, no token. More:
docs/design/service.md."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from api import charts
from api.deps import State
from api.routes.results import Id, judge, result_fields
from autotuner.analysis.report import speedups
from autotuner.base.registry import UnknownOpError, get_op
from autotuner.base.roofline import fraction
from autotuner.engine.sweeps.refine import neighbour_losses, worst_pair
from autotuner.launch.serving import device_info
from autotuner.store.errors import JOB_STATES
from autotuner.store.errors import NotAStore as NotAutotunerDatabase
from autotuner.store.errors import StoreUnavailable as DatabaseUnavailable
from autotuner.store.interfaces import Storage
from autotuner.store.regret import sweep_points
from autotuner.store.resolution import has_torch_op, torch_faster
from autotuner.store.rows import CrossTimingRow, JobRow, ResultRow, SweepRow
from search_spaces.contract import ProblemType

HERE = Path(__file__).resolve().parent.parent
STATIC = HERE / "static"
TEMPLATES = Jinja2Templates(env=Environment(loader=FileSystemLoader(HERE / "templates"),
                                            autoescape=select_autoescape(default=True, default_for_string=True)))
TEMPLATES.env.filters.update(when=lambda t: when(t), ms=lambda v: "" if v is None else f"{v:.4g}",
                             x=lambda v: "" if v is None else f"{v:.2f}x",
                             pct=lambda v: "" if v is None else f"{v:.0%}")
UNAVAILABLE = (DatabaseUnavailable, NotAutotunerDatabase, OperationalError, InterfaceError, PoolTimeout)
QUEUE_LIMIT = 50  # jobs shown per state
RESULTS_LIMIT = 500

# column: (heading, key for sorting; None sorts last whichever the direction)
COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any]], Any]]] = {
    "op": ("op / kernel", lambda r: r["op"]),
    "shape": ("shape", lambda r: r["shape"]),
    "dtype": ("dtype", lambda r: r["dtype"]),
    "config": ("tuned config", lambda r: r["config_text"]),
    "time": ("time (ms)", lambda r: r["median_ms"]),
    "vs_default": ("vs default", lambda r: r["speedup_vs_default"]),
    "vs_torch": ("vs torch", lambda r: r["speedup_vs_torch"]),
    "roofline": ("roofline", lambda r: r["roofline"]),
    "state": ("state", lambda r: r["stale"]),
    "when": ("tuned", lambda r: r["updated_at"]),
}


def _utc(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


def when(t: datetime | None) -> str:
    t = _utc(t)
    return t.strftime("%Y-%m-%d %H:%M UTC") if t else ""


def age(t: datetime | None, now: datetime) -> str:
    t = _utc(t)
    if t is None:
        return "never"
    s = max(0.0, (now - t).total_seconds())
    return f"{s:.0f} s ago" if s < 120 else f"{s / 60:.0f} min ago" if s < 7200 else f"{s / 3600:.1f} h ago"


def result_view(row: ResultRow) -> dict[str, Any]:
    """A stored best config as the pages show it: the API's fields, the problem's shape and dtype, the roofline
    fraction, and why it is stale."""
    op, best = judge(row)
    view = result_fields(row, (op, best))
    view.update(shape=row.problem.get("shape", row.problem_key), dtype=row.problem.get("dtype", ""),
                config_text=charts.config_text(row.config), roofline=None, stale_reason=None, call="", known=True,
                launches_torch=False)
    if op is None:
        view.update(known=False, stale_reason="this server does not load this kernel, so cannot vouch for it")
        return view
    view["stale_reason"] = best.stale_reason
    view["call"] = op.call
    view["launches_torch"] = has_torch_op(op) and torch_faster(row.torch_ms, row.median_ms)
    try:
        problem = op.problem_from_dict(row.problem)
    except (TypeError, ValueError):  # a problem stored by another version of the op
        return view
    view.update(shape=problem.shape, dtype=problem.dtype)
    if op.flops and op.bytes_moved:
        view["roofline"] = fraction(device_info(row.device), op.flops(problem), op.bytes_moved(problem),
                                    row.median_ms, view["dtype"])
    return view


def varying_part(shapes: Sequence[str]) -> list[str]:
    """What tells a sweep's points apart, for labels: the one token that varies ("M=1024" or "1024"), else the
    whole shape."""
    split = [re.split(r"([x,])", s) for s in shapes]
    if len(split) > 1 and len({len(s) for s in split}) == 1:
        varying = [i for i in range(len(split[0])) if len({s[i] for s in split}) > 1]
        if len(varying) == 1:
            return [s[varying[0]] for s in split]
    return list(shapes)


def sweep_views(store: Storage, device_key: str) -> list[dict[str, Any]]:
    """Each sweep cross-timed on this device, as a heat map of its winners' losses on its points (the op's
    current kernel and Triton version where this server knows the op; every measurement otherwise)."""
    out = []
    for sweep in store.sweeps():
        timings = store.cross_timings(sweep.id, device_key=device_key)
        try:
            op = get_op(sweep.op)
            timings = [t for t in timings if t.kernel_hash == op.kernel_hash] or timings
            points = sweep_points(op, sweep)
        except UnknownOpError:
            points = []
        keys = [p.key for p in points]
        if not timings or len(keys) != len(sweep.shapes):
            continue
        refined = set(sweep.refined)
        labels = [label + ("*" if shape in refined else "")
                  for label, shape in zip(varying_part(sweep.shapes), sweep.shapes, strict=True)]
        chart = charts.regret_heatmap(keys, labels, [(t.winner_key, t.on_key, t.regret if t.ms is not None else None)
                                                     for t in timings])
        out.append({"sweep": sweep, "chart": chart, "worst": _worst(sweep, points, timings)})
    return out


def _worst(sweep: SweepRow, points: list[ProblemType], timings: list[CrossTimingRow]) -> dict[str, Any] | None:
    """The sweep's worst neighbouring pair as the page says it (autotuner.engine.sweeps.refine), or None if none was
    measured."""
    own = {t.on_key: t.config for t in timings if t.winner_key == t.on_key}
    worst = worst_pair(neighbour_losses(points, [own.get(p.key) for p in points], timings))
    if worst is None or worst.loss is None:
        return None
    labels = dict(zip([p.key for p in points], varying_part(sweep.shapes), strict=True))
    return {"low": labels[worst.low], "high": labels[worst.high],
            "loss": None if worst.loss == float("inf") else worst.loss,
            "within": sweep.target is not None and not worst.above(sweep.target)}


def sort_rows(rows: list[dict[str, Any]], column: str, descending: bool) -> list[dict[str, Any]]:
    key = COLUMNS[column][1]
    present = [r for r in rows if key(r) is not None]
    return sorted(present, key=key, reverse=descending) + [r for r in rows if key(r) is None]


def triton_config(config: dict[str, Any]) -> str:
    """The `triton.Config(...)` a `@triton.autotune` list takes for this config."""
    cfg = dict(config)
    extra = "".join(f", {k}={cfg.pop(k)!r}" for k in ("num_warps", "num_stages", "num_ctas") if k in cfg)
    return f"triton.Config({cfg!r}{extra})"


def _trial_points(trials: list[Any]) -> list[charts.TrialPoint]:
    return [charts.TrialPoint(i + 1, t.median_ms if t.status == "ok" else None, t.status, dict(t.config), t.error)
            for i, t in enumerate(trials)]


def router(templates: Jinja2Templates = TEMPLATES) -> APIRouter:
    pages = APIRouter(include_in_schema=False)

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status)

    def open_store(st: Any) -> Storage:
        return st.store.get()  # type: ignore[no-any-return]

    def unavailable(request: Request) -> HTMLResponse:
        return render(request, "error.html", 503, title="Database unavailable",
                      message="The result database is unavailable right now. This page will work again when it is "
                              "back; try reloading in a few seconds.")

    @pages.get("/", response_class=HTMLResponse)
    def index(request: Request, st: State, op: Annotated[str | None, Query(max_length=200)] = None,
              sort: Annotated[str, Query(max_length=20)] = "when",
              order: Annotated[str, Query(max_length=20)] = "desc") -> HTMLResponse:
        sort = sort if sort in COLUMNS else "when"  # a stale or hand-edited link still shows the page
        order = order if order in ("asc", "desc") else "desc"
        try:
            store = open_store(st)
            devices = store.devices()
            rows, total = store.results_page(op=op or None, device_key=None, limit=RESULTS_LIMIT, offset=0)
            all_ops = sorted({r.op for r in store.results()})
            bars, left_out = speedups(store, op=op or None)
            jobs = store.count_jobs()
            sweeps = {d.key: sweep_views(store, d.key) for d in devices}
        except UNAVAILABLE:
            return unavailable(request)
        views = sort_rows([result_view(r) for r in rows], sort, order == "desc")
        per_device = [(d, [v for v in views if v["device"] == d.key],
                       charts.speedup_chart([b for b in bars if b.device == d.key]), sweeps[d.key]) for d in devices]
        return render(request, "index.html", title="Tuned results", devices=per_device, op=op or "", ops=all_ops,
                      sort=sort, order=order, columns=COLUMNS, total=total, shown=len(views), jobs=jobs,
                      left_out=left_out)

    @pages.get("/ui/results/{result_id}", response_class=HTMLResponse)
    def result_page(request: Request, st: State, result_id: Id,
                    param: Annotated[str | None, Query(max_length=100)] = None) -> HTMLResponse:
        try:
            found = open_store(st).result(result_id)
        except UNAVAILABLE:
            return unavailable(request)
        if found is None:
            return render(request, "error.html", 404, title="No such result",
                          message=f"There is no result with id {result_id}.")
        row, run = found
        view = result_view(row)
        shown = list(run.trials) if run else []  # measured and failed; rejections are the run's counts
        rejected = sorted(((rule, e["count"], e["example"]) for rule, e in ((run.rejections or {}) if run else {}).items()),
                          key=lambda r: -r[1])
        points = _trial_points(shown)
        names = charts.param_names(points)
        param = param if param in names else (names[0] if names else None)
        measured = [t for t in shown if t.status == "ok"]
        return render(request, "result.html", title=f"{row.op} {view['shape']}", r=view, run=run, trials=shown,
                      chart=charts.trials_chart(points), param=param, params=names,
                      param_chart=charts.param_chart(points, param) if param else None,
                      measured=len(measured), failed=len(shown) - len(measured), rejected=rejected,
                      triton_config=triton_config(row.config), config_keys=list(row.config),
                      statuses=Counter(t.status for t in shown))

    def queue_context(st: Any) -> dict[str, Any]:
        store = open_store(st)
        now = datetime.now(timezone.utc)
        counts = store.count_jobs()
        sections: list[tuple[str, list[JobRow]]] = []
        for state in ("running", "queued", "failed", "done"):
            jobs, _ = store.jobs_page(state=state, limit=QUEUE_LIMIT, offset=0)
            sections.append((state, jobs))
        run_ids = [j.run_id for _, jobs in sections for j in jobs if j.run_id is not None]
        return dict(sections=sections, counts=counts, now=now, age=age, states=JOB_STATES,
                    results=store.results_of_runs(run_ids), limit=QUEUE_LIMIT,
                    updated=now.strftime("%H:%M:%S UTC"))

    @pages.get("/ui/queue", response_class=HTMLResponse)
    def queue(request: Request, st: State) -> HTMLResponse:
        try:
            context = queue_context(st)
        except UNAVAILABLE:
            return unavailable(request)
        return render(request, "queue.html", title="Job queue", **context)

    @pages.get("/ui/queue/rows", response_class=HTMLResponse)
    def queue_rows(request: Request, st: State) -> HTMLResponse:
        try:
            context = queue_context(st)
        except UNAVAILABLE:
            return render(request, "_unavailable.html", 503)
        return render(request, "_queue.html", **context)

    return pages


def mount_static(app: Any) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

