"""A host's first command and its bytecode fill (autotuner.base.bytecode), where torch has no bytecode of its own:
the command's wall time, when the fill ended after the command started, what the tree holds, and the next
command's wall time. Each round a new user cache folder (XDG_CACHE_HOME), so each first command is a host's first.

    python benchmarks/bytecode_fill.py [--rounds 2] [--command "tune matmul --M 4096"]

On a host whose torch keeps its bytecode nothing is kept, and the script says so.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(command: list[str], env: dict[str, str], work: Path, name: str) -> float:
    """The command's wall time, with a database of its own (a tune finds nothing tuned) and new kernel caches."""
    env = {**env, "AUTOTUNER_DB_URL": f"sqlite:///{work / name}.db", "TRITON_CACHE_DIR": str(work / f"triton_{name}"),
           "AUTOTUNER_KERNEL_CACHE_DIR": str(work / f"kept_{name}")}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autotuner", *command], env=env, cwd=work, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"`autotuner {' '.join(command)}` failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--command", default="tune matmul --M 4096", help="the command's arguments")
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for a fill's end")
    args = ap.parse_args()
    rows = []
    for r in range(1, args.rounds + 1):
        work = Path(tempfile.mkdtemp(prefix="bytecode_fill_"))
        env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "AUTOTUNER_LOCAL_WORKER": "0"}
        env.pop("AUTOTUNER_BYTECODE_CACHE", None)
        t0 = time.perf_counter()
        first = run(shlex.split(args.command), env, work, "first")
        folder = work / "cache" / "autotuner" / "pycache"
        trees = [p for p in folder.iterdir() if p.is_dir()] if folder.exists() else []
        if not trees:
            print("nothing kept: torch here keeps its own bytecode, or Python may write it")
            return
        stamp = trees[0] / "written"
        while not stamp.exists() and time.perf_counter() - t0 < args.timeout:
            time.sleep(0.05)
        ended = time.perf_counter() - t0 if stamp.exists() else float("nan")
        files = [p for p in trees[0].rglob("*.pyc")]
        size = sum(p.stat().st_size for p in files) / 2**20
        second = run(shlex.split(args.command), env, work, "next")
        rows.append((r, first, ended, len(files), size, second))
        print(f"round {r}: first {first:.2f} s, fill ended {ended:.2f} s after its start, {len(files)} files "
              f"({size:.0f} MiB), next command {second:.2f} s", flush=True)
    print(f"\n`autotuner {args.command}`, a new user cache folder each round")
    print("| round | first command (s) | fill ended after (s) | bytecode files | MiB | next command (s) |")
    print("|---|---|---|---|---|---|")
    for r, first, ended, n, size, second in rows:
        print(f"| {r} | {first:.2f} | {ended:.2f} | {n} | {size:.0f} | {second:.2f} |")


if __name__ == "__main__":
    main()
