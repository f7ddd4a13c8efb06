"""Export and import of results: JSON that round-trips exactly, `triton.Config` lists for
`@triton.autotune` users, a problem's landscape for `autotuner replay`, and the file formats ops export
themselves (`TunableOp.exports`: matmul writes vLLM's tuned-config layout, search_spaces/matmul_vllm.py).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from autotuner.store.database import Store
from search_spaces.space import counts_from_messages

FORMAT = "autotuner-export"
VERSION = 1
RUN_FIELDS = ("op", "problem_key", "problem", "kernel_hash", "triton_version", "torch_version", "strategy",
              "budget_trials", "budget_seconds", "clock", "status", "error", "started_at", "finished_at", "rejected",
              "rejections")
TRIAL_FIELDS = ("config", "config_key", "status", "median_ms", "p20_ms", "p80_ms", "retimed_ms", "compile_s", "error",
                "created_at")
BEST_FIELDS = ("op", "problem_key", "problem", "kernel_hash", "triton_version", "config", "median_ms", "default_ms",
               "torch_ms", "updated_at")
DEVICE_FIELDS = ("key", "name", "capability", "sm_count", "total_memory", "smem_per_block")


def _ts(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat()


def _row(obj: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for f in fields:
        v = getattr(obj, f)
        out[f] = _ts(v) if isinstance(v, datetime) else v
    return out


def export_data(store: Store, *, op: str | None = None, device_key: str | None = None,
                problem_key: str | None = None) -> dict[str, Any]:
    """Everything (or what the filters select): devices, runs with their trials, best configs. No row ids."""
    runs = store.runs(op=op, device_key=device_key, problem_key=problem_key)
    bests = store.results(op=op, device_key=device_key, problem_key=problem_key)
    devices = {r.device.key: r.device for r in runs} | {b.device.key: b.device for b in bests}
    run_index = {r.id: i for i, r in enumerate(runs)}
    return {
        "format": FORMAT, "version": VERSION,
        "devices": [_row(d, DEVICE_FIELDS) for _, d in sorted(devices.items())],
        "runs": [{**_row(r, RUN_FIELDS), "device": r.device.key,
                  "trials": [_row(t, TRIAL_FIELDS) for t in r.trials]} for r in runs],
        "best_configs": [{**_row(b, BEST_FIELDS), "device": b.device.key,
                          "run": run_index.get(b.run_id) if b.run_id is not None else None} for b in bests],
    }


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceRow(_Row):
    key: str
    name: str
    capability: str
    sm_count: int
    total_memory: int
    smem_per_block: int


class TrialRow(_Row):
    config: dict[str, Any]
    config_key: str
    status: str
    median_ms: float | None
    p20_ms: float | None
    p80_ms: float | None
    retimed_ms: float | None = None
    compile_s: float | None
    error: str | None
    created_at: datetime


class RunRow(_Row):
    op: str
    problem_key: str
    problem: dict[str, Any]
    kernel_hash: str
    triton_version: str
    torch_version: str
    strategy: str
    budget_trials: int | None
    budget_seconds: float | None
    clock: str
    status: str
    error: str | None
    started_at: datetime
    finished_at: datetime | None
    device: str
    trials: list[TrialRow]
    rejected: int = 0
    rejections: dict[str, Any] | None = None

    @model_validator(mode="after")
    def fold_rejections(self) -> RunRow:
        """A file written before rejections were counts lists them as `invalid` trials: they become counts."""
        old = [t for t in self.trials if t.status == "invalid" and t.median_ms is None]
        if old:
            merged = dict(self.rejections or {})
            for rule, entry in counts_from_messages([t.error or "rejected by a constraint" for t in old]).items():
                merged.setdefault(rule, {"count": 0, "example": entry["example"]})["count"] += entry["count"]
            self.rejections = merged
            self.rejected += len(old)
            self.trials = [t for t in self.trials if not (t.status == "invalid" and t.median_ms is None)]
        return self


class BestRow(_Row):
    op: str
    problem_key: str
    problem: dict[str, Any]
    kernel_hash: str
    triton_version: str
    config: dict[str, Any]
    median_ms: float
    default_ms: float | None
    torch_ms: float | None
    updated_at: datetime
    device: str
    run: int | None


class ExportFile(_Row):
    """The export format: what `export_data` writes and `import_data` reads."""

    format: str
    version: int
    devices: list[DeviceRow]
    runs: list[RunRow]
    best_configs: list[BestRow]


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:8]:
        where = ".".join(str(x) for x in e["loc"]) or "the file"
        parts.append(f"{where}: {e['msg']}")
    more = f" (and {exc.error_count() - 8} more)" if exc.error_count() > 8 else ""
    return "not a valid autotuner export: " + "; ".join(parts) + more


def parse_export(data: Any) -> ExportFile:
    """The export in `data`, checked whole before anything is written; ValueError naming every fault found."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not an autotuner export (expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ValueError(f"export version {data.get('version')!r} is not supported (this autotuner reads {VERSION})")
    try:
        export = ExportFile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_validation_message(exc)) from None
    keys = {d.key for d in export.devices}
    for i, r in enumerate(export.runs):
        if r.device not in keys:
            raise ValueError(f"runs.{i}.device: {r.device!r} is not among the file's devices")
    for i, b in enumerate(export.best_configs):
        if b.device not in keys:
            raise ValueError(f"best_configs.{i}.device: {b.device!r} is not among the file's devices")
        if b.run is not None and not 0 <= b.run < len(export.runs):
            raise ValueError(f"best_configs.{i}.run: {b.run} is not a run of the file (it has {len(export.runs)})")
    return export


def import_data(store: Store, data: Any) -> dict[str, int]:
    """Add what `export_data` wrote, in one transaction (a bad file writes nothing). Runs already present are
    skipped; a best config replaces a stored one only when faster. Returns counts of what was added."""
    export = parse_export(data)
    return store.import_rows(
        devices=[d.model_dump() for d in export.devices],
        runs=[(r.model_dump(include={*RUN_FIELDS, "device"}), [t.model_dump() for t in r.trials]) for r in export.runs],
        bests=[(b.model_dump(include={*BEST_FIELDS, "device"}), b.run) for b in export.best_configs])


def triton_configs(data: dict[str, Any], op: str) -> str:
    """Python source: one `triton.Config` per stored best config of `op`, for pasting into @triton.autotune."""
    lines = ["import triton", "", f"# autotuner: best configs of {op}", "configs = ["]
    for b in data["best_configs"]:
        if b["op"] != op:
            continue
        cfg = dict(b["config"])
        warps, stages = cfg.pop("num_warps", None), cfg.pop("num_stages", None)
        extra = "".join(f", {k}={v}" for k, v in (("num_warps", warps), ("num_stages", stages)) if v is not None)
        lines.append(f"    triton.Config({json.dumps(cfg)}{extra}),  # {b['problem_key']} on {b['device']}: "
                     f"{b['median_ms']:.4f} ms")
    lines.append("]")
    return "\n".join(lines) + "\n"


def landscape(data: dict[str, Any], op: str, problem_key: str) -> dict[str, Any]:
    """The landscape of a problem (the format `autotuner replay` and benchmarks/replay_efficiency.py read, in
    docs/DESIGN.md): every trial of its run with the most measured configs, normally an exhaustive one."""
    runs = [r for r in data["runs"] if r["op"] == op and r["problem_key"] == problem_key]
    if not runs:
        raise ValueError(f"no run of {op} {problem_key} in the database")
    run = max(runs, key=lambda r: sum(t["status"] == "ok" for t in r["trials"]))
    best = next((b for b in data["best_configs"] if b["op"] == op and b["problem_key"] == problem_key
                 and b["device"] == run["device"]), None)
    params = list(dict.fromkeys(k for t in run["trials"] for k in t["config"]))
    return {"op": op, "problem": run["problem"], "device": run["device"],
            "software": {"triton": run["triton_version"], "torch": run["torch_version"]}, "timing": run["clock"],
            "kernel": run["kernel_hash"], "baseline_ms": best["torch_ms"] if best else None, "params": params,
            "rejected": run.get("rejected", 0),
            "trials": [{"config": t["config"], "ms": t["median_ms"] if t["status"] == "ok" else None}
                       for t in run["trials"]]}


def formats() -> dict[str, list[str]]:
    """The file formats the registered ops export themselves (`TunableOp.exports`): format -> the ops."""
    from autotuner.base.registry import ops

    out: dict[str, list[str]] = {}
    for op in ops():
        for fmt in op.exports:
            out.setdefault(fmt, []).append(op.name)
    return out


def op_files(data: dict[str, Any], fmt: str) -> tuple[dict[str, Any], list[str]]:
    """The files of a format the ops export themselves, from an export's data: each declaring op's export is
    given the data with only its own best configs; file name -> content, and the notes of every op."""
    from autotuner.base.registry import get_op

    files: dict[str, Any] = {}
    notes: list[str] = []
    for name in formats().get(fmt, []):
        mine = {**data, "best_configs": [b for b in data["best_configs"] if b["op"] == name]}
        written, said = get_op(name).exports[fmt](mine)
        files.update(written)
        notes.extend(said)
    return files, notes


def write_files(data: dict[str, Any], fmt: str, out_dir: Path) -> tuple[list[Path], list[str]]:
    """Write a format's files (op_files) into `out_dir`; returns the files written and the notes."""
    files, notes = op_files(data, fmt)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, content in files.items():
        path = out_dir / fname
        path.write_text(json.dumps(content, indent=4) + "\n")
        written.append(path)
    return written, notes
