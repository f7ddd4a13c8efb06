"""Export and import: JSON that round-trips exactly, `triton.Config` lists, a problem's landscape for `autotuner
replay`, and the formats ops export themselves (`TunableOp.exports`)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from autotuner.store import rows
from autotuner.store.interfaces import Storage
from search_spaces.space import counts_from_messages

FORMAT = "autotuner-export"
VERSION = 1
# What a file holds of each row: the row's own fields (autotuner.store.rows), but the database's ids and links,
# which another database numbers its own way (a run's device and a best's run are written by key and by position).
RUN_FIELDS = rows.row_fields(rows.RunRow, exclude={"id", "device", "job_id", "trials"})
TRIAL_FIELDS = rows.row_fields(rows.TrialRow, exclude={"id", "run_id"})
BEST_FIELDS = rows.row_fields(rows.ResultRow, exclude={"id", "device", "run_id"})
DEVICE_FIELDS = rows.row_fields(rows.DeviceRow, exclude={"id"})


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


def export_data(store: Storage, *, op: str | None = None, device_key: str | None = None,
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


# What a row may hold: times finite and positive (a zero, negative or infinite time would win forever), counts
# and sizes within 64 bits, names within their columns.
Ms = Annotated[float, Field(gt=0, lt=1e9, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, lt=1e9, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, lt=2**63)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Key = Annotated[str, Field(min_length=1, max_length=400)]
Short = Annotated[str, Field(max_length=64)]


# What a field of an imported row may hold, by name; any other keeps the row's own type.
LIMITS: dict[str, Any] = {
    **dict.fromkeys(("key", "problem_key", "config_key"), Key), **dict.fromkeys(("name", "op"), Name),
    **dict.fromkeys(("capability", "kernel_hash", "triton_version", "torch_version", "strategy", "clock", "status"),
                    Short),
    **dict.fromkeys(("sm_count", "total_memory", "smem_per_block", "budget_trials", "rejected"), Count),
    **dict.fromkeys(("budget_seconds", "compile_s"), Seconds),
    **dict.fromkeys(("median_ms", "p20_ms", "p80_ms", "retimed_ms", "default_ms", "torch_ms"), Ms),
}


def _imported(row: type, names: tuple[str, ...], defaults: dict[str, Any] | None = None,
              base: type[BaseModel] = _Row, **more: Any) -> Any:
    """The import model of a row: `names` of its fields, each limited by LIMITS (optional where the row's is),
    `defaults` for fields older files lack, and `more` fields of the file's own (links by key)."""
    hints, spec = rows.row_types(row), dict[str, Any]()
    for name in names:
        limited = LIMITS.get(name)
        kind = hints[name] if limited is None else limited | None if type(None) in get_args(hints[name]) else limited
        spec[name] = (kind, (defaults or {}).get(name, ...))
    spec.update(more)
    return create_model(f"Imported{row.__name__}", __base__=base, **spec)


DeviceRow: Any = _imported(rows.DeviceRow, DEVICE_FIELDS)
TrialRow: Any = _imported(rows.TrialRow, TRIAL_FIELDS, {"retimed_ms": None})


class _RunBase(_Row):
    @model_validator(mode="after")
    def fold_rejections(self) -> Any:
        """A file written before rejections were counts lists them as `invalid` trials: they become counts."""
        run: Any = self  # (the fields are the row's: RunRow below)
        old = [t for t in run.trials if t.status == "invalid" and t.median_ms is None]
        if old:
            merged = dict(run.rejections or {})
            for rule, entry in counts_from_messages([t.error or "rejected by a constraint" for t in old]).items():
                merged.setdefault(rule, {"count": 0, "example": entry["example"]})["count"] += entry["count"]
            run.rejections = merged
            run.rejected += len(old)
            run.trials = [t for t in run.trials if not (t.status == "invalid" and t.median_ms is None)]
        return self


RunRow: Any = _imported(rows.RunRow, RUN_FIELDS, {"rejected": 0, "rejections": None}, base=_RunBase,
                   device=(Key, ...), trials=(list[TrialRow], ...))  # type: ignore[valid-type]
BestRow: Any = _imported(rows.ResultRow, BEST_FIELDS, device=(Key, ...), run=(int | None, ...))


ExportFile: Any = create_model("ExportFile", __base__=_Row, __doc__="The export format: what `export_data` writes and "
                               "`import_data` reads.", format=(str, ...), version=(int, ...),
                               devices=(list[DeviceRow], ...), runs=(list[RunRow], ...),  # type: ignore[valid-type]
                               best_configs=(list[BestRow], ...))  # type: ignore[valid-type]


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors()[:8]:
        where = ".".join(str(x) for x in e["loc"]) or "the file"
        parts.append(f"{where}: {e['msg']}")
    more = f" (and {exc.error_count() - 8} more)" if exc.error_count() > 8 else ""
    return "not a valid autotuner export: " + "; ".join(parts) + more


def parse_export(data: Any, kernel_problem: Any = None) -> Any:
    """The export in `data`, checked whole before anything is written (RowChecker; `kernel_problem`: decorated
    kernels' problem type, whose keys are then checked too); ValueError naming every fault found, one a line."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not an autotuner export (expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ValueError(f"export version {data.get('version')!r} is not supported (this autotuner reads {VERSION})")
    try:
        export: Any = ExportFile.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_validation_message(exc)) from None
    faults: list[str] = []
    keys = {d.key for d in export.devices}
    checker = RowChecker(kernel_problem)
    for i, r in enumerate(export.runs):
        if r.device not in keys:
            faults.append(f"runs.{i}.device: {r.device!r} is not among the file's devices")
        faults += checker.faults(f"runs.{i}", r.op, r.problem_key, r.problem, [(f"trials.{j}.config", t.config)
                                                                            for j, t in enumerate(r.trials)])
    for i, b in enumerate(export.best_configs):
        if b.device not in keys:
            faults.append(f"best_configs.{i}.device: {b.device!r} is not among the file's devices")
        if b.run is not None and not 0 <= b.run < len(export.runs):
            faults.append(f"best_configs.{i}.run: {b.run} is not a run of the file (it has {len(export.runs)})")
        faults += checker.faults(f"best_configs.{i}", b.op, b.problem_key, b.problem, [("config", b.config)])
    if faults:
        more = f"\n(and {len(faults) - MAX_FAULTS} more)" if len(faults) > MAX_FAULTS else ""
        raise ValueError("not a valid autotuner export:\n" + "\n".join(faults[:MAX_FAULTS]) + more)
    return export


MAX_FAULTS = 20  # lines of a refused import's message
KERNEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.<>]*$")


class RowChecker:
    """A row's op, key and configs as the op takes them, before anything is written: a known op (or a decorated
    kernel's `module:name`, whose module is never imported here), a problem whose key is the one stored with it
    and within the kernels' index range, configs of the op's space (its parameters, each within its values)."""

    def __init__(self, kernel_problem: Any = None) -> None:
        self._ops: dict[str, Any] = {}
        self.kernel_problem = kernel_problem  # decorated kernels' problem type (the caller's: a floor above)

    def _op(self, name: str) -> Any:
        if name not in self._ops:
            from autotuner.base.registry import UnknownOpError, get_op

            try:
                self._ops[name] = get_op(name)
            except UnknownOpError:
                self._ops[name] = None
        return self._ops[name]

    def faults(self, where: str, op_name: str, problem_key: str, problem: dict[str, Any],
               configs: list[tuple[str, dict[str, Any]]]) -> list[str]:
        op = self._op(op_name)
        if op is None:
            if KERNEL_NAME.match(op_name):
                return self._kernel_faults(where, problem_key, problem)
            return [f"{where}.op: unknown op {op_name!r} (a built-in op, a plugin's, or a decorated kernel's "
                    "module:name)"]
        try:
            parsed = op.check_problem(op.problem_from_dict(problem))
        except (TypeError, ValueError) as exc:
            return [f"{where}.problem: not a problem of {op_name}: {str(exc)[:200]}"]
        if parsed.key != problem_key:
            return [f"{where}.problem_key: {problem_key!r} is not the key of its problem ({parsed.key!r})"]
        out = []
        for field, config in configs:
            broken = op.space.outside(config)
            if broken:
                out.append(f"{where}.{field}: {'; '.join(broken)}")
        return out

    def _kernel_faults(self, where: str, problem_key: str, problem: dict[str, Any]) -> list[str]:
        if self.kernel_problem is None:
            return []
        try:
            parsed = self.kernel_problem(**problem)
        except (TypeError, ValueError) as exc:
            return [f"{where}.problem: not a decorated kernel's key: {str(exc)[:200]}"]
        fault = parsed.value_fault()
        if fault is not None:
            return [f"{where}.problem: {fault}"]
        if parsed.key != problem_key:
            return [f"{where}.problem_key: {problem_key!r} is not the key of its problem ({parsed.key!r})"]
        return []


def import_data(store: Storage, data: Any) -> dict[str, int]:
    """Add what `export_data` wrote (or `parse_export` read), in one transaction (a bad file writes nothing). Runs
    already present are skipped; a best config replaces a stored one only when faster. Returns counts of what
    was added."""
    export: Any = data if isinstance(data, ExportFile) else parse_export(data)
    return store.import_rows(
        devices=[d.model_dump() for d in export.devices],
        runs=[(r.model_dump(include={*RUN_FIELDS, "device"}), [t.model_dump() for t in r.trials]) for r in export.runs],
        bests=[(b.model_dump(include={*BEST_FIELDS, "device"}), b.run) for b in export.best_configs])


def triton_configs(data: dict[str, Any], op: str) -> str:
    """Python source: one `triton.Config` per stored best config of `op`, for pasting into @triton.autotune."""
    lines = ["import triton", "", f"# autotuner: best configs of {op}", "configs = ["]
    won: dict[str, list[str]] = {}  # each config once, with the problems it won
    for b in data["best_configs"]:
        if b["op"] != op:
            continue
        won.setdefault(json.dumps(b["config"], sort_keys=True), []).append(
            f"{b['problem_key']} on {b['device']}: {b['median_ms']:.4g} ms")
    for text, where in won.items():
        cfg = json.loads(text)
        warps, stages = cfg.pop("num_warps", None), cfg.pop("num_stages", None)
        extra = "".join(f", {k}={v}" for k, v in (("num_warps", warps), ("num_stages", stages)) if v is not None)
        more = f" (and {len(where) - 1} more)" if len(where) > 1 else ""
        lines.append(f"    triton.Config({json.dumps(cfg)}{extra}),  # won {where[0]}{more}")
    lines.append("]")
    return "\n".join(lines) + "\n"


def landscape(data: dict[str, Any], op: str, problem_key: str) -> dict[str, Any]:
    """The landscape of a problem (the format `autotuner replay` and benchmarks/replay_efficiency.py read, in
    docs/design/engine.md): every trial of its run with the most measured configs, normally an exhaustive one."""
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
