"""Export and import of results: JSON that round-trips exactly, `triton.Config` lists for
`@triton.autotune` users, and vLLM's tuned-config layout (one file per device and N, K; keyed by M).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from db import repository as repo
from db.engine import session_scope

FORMAT = "autotuner-export"
VERSION = 1
RUN_FIELDS = ("op", "problem_key", "problem", "kernel_hash", "triton_version", "torch_version", "strategy",
              "budget_trials", "budget_seconds", "clock", "status", "error", "started_at", "finished_at")
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


def _parse_ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _row(obj: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for f in fields:
        v = getattr(obj, f)
        out[f] = _ts(v) if isinstance(v, datetime) else v
    return out


def export_data(engine: Any, *, op: str | None = None, device_key: str | None = None,
                problem_key: str | None = None) -> dict[str, Any]:
    """Everything (or what the filters select): devices, runs with their trials, best configs. No row ids."""
    with session_scope(engine) as s:
        runs = repo.list_runs(s, op=op, device_key=device_key, problem_key=problem_key)
        bests = repo.find_best(s, op=op, device_key=device_key, problem_key=problem_key)
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


def import_data(engine: Any, data: dict[str, Any]) -> dict[str, int]:
    """Add what `export_data` wrote. Runs already present are skipped; a best config replaces a stored one
    only when faster. Returns counts of what was added."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not an autotuner export (expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ValueError(f"export version {data.get('version')!r} is not supported (this autotuner reads {VERSION})")
    counts = {"devices": 0, "runs": 0, "trials": 0, "best_configs": 0}
    with session_scope(engine) as s:
        known = {d.key for d in repo.list_devices(s)}
        device_ids = {d["key"]: repo.upsert_device(s, **d) for d in data["devices"]}
        counts["devices"] = len(set(device_ids) - known)
        run_ids: dict[int, int] = {}
        for i, r in enumerate(data["runs"]):
            fields = {k: r[k] for k in RUN_FIELDS}
            fields["started_at"] = _parse_ts(fields["started_at"])
            fields["finished_at"] = _parse_ts(fields["finished_at"])
            fields["device_id"] = device_ids[r["device"]]
            existing = repo.find_run(s, op=fields["op"], problem_key=fields["problem_key"],
                                     device_id=fields["device_id"], started_at=fields["started_at"])
            if existing is not None:
                run_ids[i] = existing
                continue
            trials = [{**t, "created_at": _parse_ts(t["created_at"])} for t in r["trials"]]
            run_ids[i] = repo.insert_run(s, fields=fields, trials=trials)
            counts["runs"] += 1
            counts["trials"] += len(trials)
        for b in data["best_configs"]:
            fields = {k: b[k] for k in BEST_FIELDS}
            fields["updated_at"] = _parse_ts(fields["updated_at"])
            written = repo.save_best(s, device_id=device_ids[b["device"]],
                                     run_id=run_ids.get(b["run"]) if b["run"] is not None else None, **fields)
            counts["best_configs"] += int(written)
    return counts


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


VLLM_KEYS = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M",
             "num_warps": "num_warps", "num_stages": "num_stages"}


def vllm_files(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """vLLM's layout for tuned matmul configs: `N={N},K={K},device_name={device}.json` -> {M: config}."""
    names = {d["key"]: d["name"] for d in data["devices"]}
    files: dict[str, dict[str, Any]] = {}
    for b in data["best_configs"]:
        if b["op"] != "matmul" or b["problem"].get("epilogue", "none") != "none":
            continue
        if b["config"].get("SPLIT_K", 1) != 1:
            continue  # vLLM's kernel has no split-K: such a config cannot be expressed there
        p = b["problem"]
        device = re.sub(r"[^A-Za-z0-9_\-]+", "_", names.get(b["device"], b["device"])).strip("_")
        fname = f"N={p['N']},K={p['K']},device_name={device},dtype={p['dtype']}.json"
        files.setdefault(fname, {})[str(p["M"])] = {VLLM_KEYS[k]: v for k, v in b["config"].items() if k in VLLM_KEYS}
    return {f: dict(sorted(m.items(), key=lambda kv: int(kv[0]))) for f, m in files.items()}


def write_vllm(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, content in vllm_files(data).items():
        path = out_dir / fname
        path.write_text(json.dumps(content, indent=4) + "\n")
        written.append(path)
    return written


