"""The results page's charts as geometry: plain numbers the templates draw as inline SVG (no script, no CDN). More:
docs/design/service.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotuner.analysis.report import Speedup

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 24, 48
LABEL = 26  # characters of a problem's label under a bar chart (the full one is in its bars' tooltips)


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    label: str  # the tooltip
    kind: str  # the CSS class: trial, failed, param, bar-torch, bar-default, bar-tuned
    w: float = 0.0  # bars only
    h: float = 0.0


@dataclass
class Chart:
    x_title: str
    y_title: str
    width: int = WIDTH
    height: int = HEIGHT
    marks: list[Mark] = field(default_factory=list)
    line: list[tuple[float, float]] = field(default_factory=list)  # the best so far
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    rule: float | None = None  # y of a horizontal reference line (speedup 1.0)
    log: bool = False
    bottom: int = BOTTOM  # room under the plot for tick labels and the axis title

    @property
    def plot(self) -> tuple[int, int, int, int]:
        """The plotting area: x0, y0 (top), x1, y1 (bottom)."""
        return LEFT, TOP, self.width - RIGHT, self.height - self.bottom

    def polyline(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.line)


@dataclass(frozen=True)
class TrialPoint:
    """One trial as the charts need it: its order, time (None unless measured), status and config."""

    order: int
    ms: float | None
    status: str
    config: dict[str, Any]
    error: str | None = None


def _fmt_ms(v: float) -> str:
    return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"


class _Scale:
    """Times to y: linear from a little under the fastest, or log when they span more than 10x."""

    def __init__(self, values: Sequence[float], top: float, bottom: float) -> None:
        lo, hi = min(values), max(values)
        self.log = lo > 0 and hi / lo > 10
        if self.log:
            self.lo, self.hi = math.log10(lo) - 0.05, math.log10(hi) + 0.05
        else:
            pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
            self.lo, self.hi = max(0.0, lo - pad), hi + pad
        self.top, self.bottom = top, bottom

    def __call__(self, v: float) -> float:
        t = math.log10(v) if self.log else v
        return self.bottom - (t - self.lo) / (self.hi - self.lo) * (self.bottom - self.top)

    def ticks(self) -> list[tuple[float, str]]:
        if self.log:
            out = []
            for e in range(math.floor(self.lo), math.ceil(self.hi) + 1):
                for m in (1, 2, 5):
                    v = m * 10.0**e
                    if self.lo <= math.log10(v) <= self.hi:
                        out.append((self(v), _fmt_ms(v)))
            return out
        step = _nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step) * step
        n = int((self.hi - first) / step + 1e-9) + 1
        return [(self(first + i * step), _fmt_ms(first + i * step)) for i in range(n)]


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    e = 10.0 ** math.floor(math.log10(raw))
    return next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= raw)


def config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def trials_chart(trials: Sequence[TrialPoint]) -> Chart | None:
    """Every measured trial's time in the order measured, the best so far, failures as marks along the top.
    None when no trial was measured."""
    measured = [t for t in trials if t.ms is not None]
    if not measured:
        return None
    chart = Chart(x_title="trial, in the order measured", y_title="time (ms)")
    x0, y0, x1, y1 = chart.plot
    n = len(trials)
    xs = {t.order: x0 + (i + 0.5) / n * (x1 - x0) for i, t in enumerate(trials)}
    scale = _Scale([t.ms for t in measured if t.ms is not None], y0 + 10, y1)
    chart.log = scale.log
    chart.y_ticks = scale.ticks()
    best = math.inf
    for t in trials:
        x = xs[t.order]
        if t.ms is None:
            chart.marks.append(Mark(x, y0 + 2, f"#{t.order} {t.status}: {t.error or ''} {config_text(t.config)}",
                                    "failed"))
            continue
        chart.marks.append(Mark(x, scale(t.ms), f"#{t.order} {t.ms:.4g} ms {config_text(t.config)}", "trial"))
        if t.ms < best:
            if chart.line:
                chart.line.append((x, scale(best)))  # a step: the best holds until this trial beats it
            best = t.ms
            chart.line.append((x, scale(best)))
    chart.line.append((x1, scale(best)))
    step = max(1, math.ceil(n / 10))
    chart.x_ticks = [(xs[t.order], str(i + 1)) for i, t in enumerate(trials) if i % step == 0]
    return chart


def param_names(trials: Sequence[TrialPoint]) -> list[str]:
    """The parameters that vary among the measured trials, in config order."""
    measured = [t.config for t in trials if t.ms is not None]
    names: list[str] = []
    for c in measured:
        names.extend(k for k in c if k not in names)
    return [k for k in names if len({repr(c.get(k)) for c in measured}) > 1] or names


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, repr(v))


def param_chart(trials: Sequence[TrialPoint], param: str) -> Chart | None:
    """Each measured trial's time against its value of `param` (one column per value), the fastest per value
    joined by a line. None when no measured trial has the parameter."""
    measured = [t for t in trials if t.ms is not None and param in t.config]
    if not measured:
        return None
    chart = Chart(x_title=param, y_title="time (ms)")
    x0, y0, x1, y1 = chart.plot
    values = sorted({repr(t.config[param]): t.config[param] for t in measured}.values(), key=_sort_key)
    col = {repr(v): x0 + (i + 0.5) / len(values) * (x1 - x0) for i, v in enumerate(values)}
    scale = _Scale([t.ms for t in measured if t.ms is not None], y0, y1)
    chart.log = scale.log
    chart.y_ticks = scale.ticks()
    chart.x_ticks = [(col[repr(v)], str(v)) for v in values]
    fastest: dict[str, float] = {}
    for t in measured:
        assert t.ms is not None
        key = repr(t.config[param])
        chart.marks.append(Mark(col[key], scale(t.ms), f"#{t.order} {t.ms:.4g} ms {config_text(t.config)}", "param"))
        fastest[key] = min(fastest.get(key, math.inf), t.ms)
    chart.line = [(col[repr(v)], scale(fastest[repr(v)])) for v in values]
    return chart


def speedup_chart(bars: Sequence[Speedup]) -> Chart | None:
    """Per tuned problem three bars: torch eager (1.0), the default config and the tuned config, as speedups over
    the baseline (the default config for kernels with no torch version)."""
    if not bars:
        return None
    chart = Chart(x_title="", y_title="speedup over torch eager", height=HEIGHT + 70, bottom=BOTTOM + 70)
    x0, y0, x1, y1 = chart.plot  # under it, room for the problems' labels
    top = max(max(b.tuned, b.default or 0.0, 1.0) for b in bars) * 1.12
    scale = _Scale([0.0, top], y0, y1)
    scale.lo, scale.hi = 0.0, top
    chart.y_ticks = scale.ticks()
    chart.rule = scale(1.0)
    slot = (x1 - x0) / len(bars)
    w = min(28.0, slot / 3.6)
    for i, b in enumerate(bars):
        mid = x0 + (i + 0.5) * slot
        base = "torch eager" if b.baseline == "torch" else "default config (no torch version)"
        series: list[tuple[str, float | None, str]] = [("bar-torch", 1.0, base)]
        if b.baseline == "torch":
            series.append(("bar-default", b.default, "default config"))
        series.append(("bar-tuned", b.tuned, "tuned config"))
        for j, (kind, v, name) in enumerate(series):
            if v is None:
                continue
            x = mid + (j - (len(series) - 1) / 2) * w - w / 2
            chart.marks.append(Mark(x, scale(v), f"{b.label}: {name} {v:.2f}x", kind, w=w, h=scale(0.0) - scale(v)))
        chart.x_ticks.append((mid, b.label if len(b.label) <= LABEL else b.label[:LABEL - 1] + "…"))
    return chart


REGRET_LEVELS = (0.01, 0.03, 0.10, 0.30)  # a cell's shade: at most 1%, 3%, 10%, 30% slower, or more


@dataclass(frozen=True)
class HeatCell:
    x: float
    y: float
    w: float
    h: float
    text: str
    level: str  # the CSS class: heat-0 (fastest) .. heat-4, heat-own (the point's own winner), heat-na
    title: str


@dataclass
class Heatmap:
    rows: list[tuple[float, str]]  # (y of the row's middle, label): the winners
    cols: list[tuple[float, str]]  # (x of the column's middle, label): the points they were timed on
    cells: list[HeatCell]
    width: int
    height: int
    left: int
    top: int


def regret_heatmap(points: Sequence[str], labels: Sequence[str],
                   cells: Sequence[tuple[str, str, float | None]]) -> Heatmap:
    """A sweep's cross timings as a grid: a row per point's winner, a column per point it was timed on, each cell
    its loss against that point's own winner (`cells`: winner key, on key, regret; None where not valid or it
    failed). `labels` name the points for people (the swept value)."""
    n = len(points)
    size = max(28, min(64, 560 // max(1, n)))
    left, top = 96, 28
    index = {key: i for i, key in enumerate(points)}
    out = []
    for winner, on, regret in cells:
        if winner not in index or on not in index:
            continue
        i, j = index[winner], index[on]
        if regret is None:
            level, text = "heat-na", "-"
        elif winner == on:
            level, text = "heat-own", "own"
        else:
            level = f"heat-{sum(regret > t for t in REGRET_LEVELS)}"
            text = f"{regret:+.0%}" if abs(regret) >= 0.01 else f"{regret:+.1%}"
        title = (f"{winner}'s winner on {on}: " +
                 ("not valid there, or it failed" if regret is None else f"{regret:+.1%} against {on}'s own winner"))
        out.append(HeatCell(left + j * size, top + i * size, size, size, text, level, title))
    return Heatmap(rows=[(top + (i + 0.5) * size, labels[i]) for i in range(n)],
                   cols=[(left + (j + 0.5) * size, labels[j]) for j in range(n)], cells=out,
                   width=left + n * size + 8, height=top + n * size + 8, left=left, top=top)
