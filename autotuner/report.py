"""`autotuner report`: one PNG, per tuned problem, of the tuned config against the default config and torch.

Bars are speedups over torch eager (1.0 = as fast as torch), from the stored best configs: the tuned time,
the default config's time and torch's time measured in the same tuning run. A result with no torch version
(an `autotuner.autotune` kernel) is drawn against its default config instead, and labelled so. One panel per GPU; results of
the interpreter (CPU wall-clock) are left out.
"""

from __future__ import annotations

from pathlib import Path

from autotuner.device import INTERPRETER
from autotuner.store import Store


def plot_results(store: Store, output: Path, *, op: str | None = None, device_key: str | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A result with no torch time (a decorated kernel has no torch version) is drawn against its default config.
    found: list[tuple[str, str, float, float | None, float]] = [
        (r.device.key, f"{r.op} {r.problem_key}" + ("" if r.torch_ms else " (vs its default)"), r.median_ms,
         r.default_ms, float(r.torch_ms or r.default_ms or 0.0))
        for r in store.results(op=op, device_key=device_key) if r.torch_ms or r.default_ms]
    # Interpreter results are CPU wall-clock times: a ratio of them to torch's says nothing about a GPU.
    rows = [r for r in found if r[0] != INTERPRETER]
    if not rows:
        where = (f" for op {op!r}" if op else "") + (f" on {device_key!r}" if device_key else "")
        skipped = len(found) - len(rows)
        raise ValueError(f"no GPU-timed results with a torch or default time to plot{where}" +
                         (f" ({skipped} interpreter results left out: their CPU wall-clock times say nothing "
                          "about GPU speed)" if skipped else ""))
    devices = sorted({r[0] for r in rows})
    fig, axes = plt.subplots(len(devices), 1, figsize=(max(8, 0.9 * len(rows) + 3), 4.5 * len(devices)),
                             squeeze=False)
    for ax, dev in zip(axes[:, 0], devices, strict=True):
        mine = sorted((r for r in rows if r[0] == dev), key=lambda r: r[1])
        xs = range(len(mine))
        width = 0.27
        tuned = [r[4] / r[2] for r in mine]
        default = [r[4] / r[3] if r[3] else float("nan") for r in mine]  # no bar where none was measured
        ax.bar([x - width for x in xs], [1.0] * len(mine), width, label="torch eager", color="#999999")
        ax.bar(list(xs), default, width, label="Triton, default config", color="#7fa7d9")
        ax.bar([x + width for x in xs], tuned, width, label="Triton, tuned config", color="#1f5fbf")
        for x, v in zip(xs, tuned, strict=True):
            ax.annotate(f"{v:.2f}x", (x + width, v), ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks(list(xs), [r[1] for r in mine], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("speedup over torch eager\n(over the default config where no torch version exists)")
        ax.set_title(dev)
        ax.legend(fontsize=8)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return len(rows)
