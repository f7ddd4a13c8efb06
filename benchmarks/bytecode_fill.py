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


def run(command: list[str], env: dict[str, str], work: Path, name: str, folder: Path | None = None,
        timeout: float = 300) -> tuple[float, float | None]:
    """The command's wall time, with a database of its own (a tune finds nothing tuned) and new kernel caches; and
    when a stamp first appeared in a tree of `folder` (a fill's end), watched from the command's start (None: no
    tree, or no stamp within `timeout`)."""
    env = {**env, "AUTOTUNER_DB_URL": f"sqlite:///{work / name}.db", "TRITON_CACHE_DIR": str(work / f"triton_{name}"),
           "AUTOTUNER_KERNEL_CACHE_DIR": str(work / f"kept_{name}")}
    t0 = time.perf_counter()
    wall: float | None = None
    ended: float | None = None
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen([sys.executable, "-m", "autotuner", *command], env=env, cwd=work,
                                   stdout=subprocess.DEVNULL, stderr=err, text=True)
        while True:
            now = time.perf_counter() - t0
            if wall is None and process.poll() is not None:
                wall = now
            if folder is not None and ended is None and any(folder.glob("*/written")):
                ended = now
            watching = folder is not None and ended is None and any(folder.glob("*/")) and now < timeout
            if wall is not None and not watching:
                break
            time.sleep(0.02)
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"`autotuner {' '.join(command)}` failed ({process.returncode}): {err.read()[-2000:]}")
    return wall, ended


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
        folder = work / "cache" / "autotuner" / "pycache"
        first, ended = run(shlex.split(args.command), env, work, "first", folder, args.timeout)
        trees = [p for p in folder.iterdir() if p.is_dir()] if folder.exists() else []
        if not trees:
            print("nothing kept: torch here keeps its own bytecode, or Python may write it")
            return
        files = [p for p in trees[0].rglob("*.pyc")]
        size = sum(p.stat().st_size for p in files) / 2**20
        second, _ = run(shlex.split(args.command), env, work, "next")
        rows.append((r, first, ended, len(files), size, second))
        print(f"round {r}: first {first:.2f} s, fill ended {ended or float('nan'):.2f} s after its start, "
              f"{len(files)} files ({size:.0f} MiB), next command {second:.2f} s", flush=True)
    print(f"\n`autotuner {args.command}`, a new user cache folder each round")
    print("| round | first command (s) | fill ended after (s) | bytecode files | MiB | next command (s) |")
    print("|---|---|---|---|---|---|")
    for r, first, ended, n, size, second in rows:
        print(f"| {r} | {first:.2f} | {ended or float('nan'):.2f} | {n} | {size:.0f} | {second:.2f} |")


if __name__ == "__main__":
    main()
