"""matmul's `autotuner export --format vllm`: vLLM's tuned-config files (one per device, N, K and dtype; keyed
by M), from an export's rows. Declared in the matmul op's `exports`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VLLM_KEYS = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M",
             "num_warps": "num_warps", "num_stages": "num_stages"}


def _pointer_config(data: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[dict[str, Any], float] | None:
    """The fastest measured config of the best config's run that vLLM's pointer kernel can run (no TMA, no
    split-K), with its time."""
    if b.get("run") is None:
        return None
    ok = [(t.get("retimed_ms") or t["median_ms"], t["config"]) for t in data["runs"][b["run"]]["trials"]
          if t["status"] == "ok" and t["median_ms"] is not None and not t["config"].get("TMA", 0)
          and t["config"].get("SPLIT_K", 1) == 1]
    if not ok:
        return None
    ms, config = min(ok, key=lambda x: x[0])
    return config, ms


def vllm_files(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """vLLM's layout for tuned matmul configs: `N={N},K={K},device_name={device},dtype={dtype}.json` -> {M: config}, and
    a note per result left out or changed (vLLM's kernel has no TMA or split-K)."""
    names = {d["key"]: d["name"] for d in data["devices"]}
    files: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for b in data["best_configs"]:
        where = f"matmul {b['problem_key']} on {b['device']}"
        if b["problem"].get("epilogue", "none") != "none":
            notes.append(f"{where}: left out (vLLM's file holds plain matmuls; this one fuses {b['problem']['epilogue']})")
            continue
        config = dict(b["config"])
        if config.get("TMA", 0) or config.get("SPLIT_K", 1) != 1:
            what = "TMA loads" if config.get("TMA", 0) else f"SPLIT_K={config['SPLIT_K']}"
            pointer = _pointer_config(data, b)
            if pointer is None:
                notes.append(f"{where}: left out (the winner uses {what}, which vLLM's kernel lacks, and its run "
                             "measured no config without them)")
                continue
            config, ms = pointer
            notes.append(f"{where}: the winner uses {what} ({b['median_ms']:.4f} ms), which vLLM's kernel lacks; "
                         f"exported the run's fastest config without them ({ms:.4f} ms)")
        p = b["problem"]
        device = re.sub(r"[^A-Za-z0-9_\-]+", "_", names.get(b["device"], b["device"])).strip("_")
        fname = f"N={p['N']},K={p['K']},device_name={device},dtype={p['dtype']}.json"
        files.setdefault(fname, {})[str(p["M"])] = {VLLM_KEYS[k]: v for k, v in config.items() if k in VLLM_KEYS}
    return {f: dict(sorted(m.items(), key=lambda kv: int(kv[0]))) for f, m in files.items()}, notes
