"""`autotuner report`: one PNG of speedups over torch eager per tuned problem (tuned and default config, from the same
run), one panel per GPU; a kernel with no torch baseline is drawn against its default config; interpreter results are
left out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotuner.base.device import INTERPRETER
from autotuner.store.interfaces import ResultBrowser


@dataclass(frozen=True)
class Speedup:
    """One tuned problem's bars: speedups over its baseline (torch eager, or its default config where the op has
    no torch version: an `autotuner.autotune` kernel)."""

    device: str
    label: str
    tuned: float
    default: float | None  # None: the default config was not measured
    baseline: str  # "torch" or "default"
    result_id: int


def speedups(store: ResultBrowser, *, op: str | None = None,
             device_key: str | None = None) -> tuple[list[Speedup], int]:
    """The bars of every GPU-timed result with a torch or default time, and how many interpreter results were
    left out (their CPU wall-clock times say nothing about a GPU)."""
    rows: list[Speedup] = []
    skipped = 0
    for r in store.results(op=op, device_key=device_key):
        base = r.torch_ms or r.default_ms
        if not base or not r.median_ms:
            continue
        if r.device.key == INTERPRETER:
            skipped += 1
            continue
        against = "torch" if r.torch_ms else "default"
        rows.append(Speedup(r.device.key, f"{r.op} {r.problem_key}" + ("" if r.torch_ms else " (vs its default)"),
                            base / r.median_ms, base / r.default_ms if r.default_ms else None, against, r.id))
    return sorted(rows, key=lambda s: (s.device, s.label)), skipped


def plot_results(store: ResultBrowser, output: Path, *, op: str | None = None, device_key: str | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, skipped = speedups(store, op=op, device_key=device_key)
    if not rows:
        where = (f" for op {op!r}" if op else "") + (f" on {device_key!r}" if device_key else "")
        raise ValueError(f"no GPU-timed results with a torch or default time to plot{where}" +
                         (f" ({skipped} interpreter results left out: their CPU wall-clock times say nothing "
                          "about GPU speed)" if skipped else ""))
    devices = sorted({r.device for r in rows})
    fig, axes = plt.subplots(len(devices), 1, figsize=(max(8, 0.9 * len(rows) + 3), 4.5 * len(devices)),
                             squeeze=False)
    for ax, dev in zip(axes[:, 0], devices, strict=True):
        mine = [r for r in rows if r.device == dev]
        xs = range(len(mine))
        width = 0.27
        tuned = [r.tuned for r in mine]
        default = [r.default if r.default else float("nan") for r in mine]  # no bar where none was measured
        ax.bar([x - width for x in xs], [1.0] * len(mine), width, label="torch eager", color="#999999")
        ax.bar(list(xs), default, width, label="Triton, default config", color="#7fa7d9")
        ax.bar([x + width for x in xs], tuned, width, label="Triton, tuned config", color="#1f5fbf")
        for x, v in zip(xs, tuned, strict=True):
            ax.annotate(f"{v:.2f}x", (x + width, v), ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks(list(xs), [r.label for r in mine], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over torch eager\n(over the default config where no torch version exists)")
        ax.set_title(dev)
        ax.legend(fontsize=8)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return len(rows)
