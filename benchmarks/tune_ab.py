"""Cold `autotuner tune` of two or more source trees, interleaved on one host (issue 49; meant for a GPU host).

    git archive <commit> | tar x -C old          # the tree to compare with (any ignored folder, carried to the GPU)
    python benchmarks/tune_ab.py old . [more trees] [--rounds 3] [--tune "matmul --M 4096"] [--share] [--drop-caches]
                                 [--spy 200] [--fresh-bytecode] [--own-bytecode]

Hosts of one device kind differ by seconds in a cold start (torch's import alone 3.4-7.7 s: benchmarks/RESULTS.md),
so a before/after is only worth reporting from one host, the trees alternating round by round (A, B, C, ... in the
order given). Each run is a new process with a new Triton cache and a new SQLite database: `autotuner tune <--tune>
--json` with the tree first on PYTHONPATH and as the working folder, its stderr and JSON kept in --out. With
`--share`, each round is three runs per tree, as three fresh hosts sharing compiles would be (alone; the first host
of a shared database; a second that loads the first's compiles). `--drop-caches` empties the page cache before
each run (root only), as on a host that has not loaded torch since it booted. `--fresh-bytecode` empties the
bytecode autotuner's commands keep (autotuner.base.bytecode: where torch is installed without its own) before each
run, as on a host where no command ran before; `--own-bytecode` keeps each tree's in a folder of its own (its own
XDG_CACHE_HOME), so that one tree's commands never read bytecode another's wrote. `--spy RATE` records each run with
py-spy (its collapsed stacks, by process and thread, beside the run's log). Prints one line a run (wall time and
the phases that matter for a cold start), then each tree's means.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("startup_s", "plan_s", "setup_s", "worker_fork_s", "worker_context_s", "worker_ready_s", "worker_flush_s",
          "search_s", "search_worker_s", "compiles", "compile_wait_s", "retime_s", "retime_worker_s")


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


# The processes a command leaves to write its bytecode: a fill (autotuner.base.bytecode_fill), or an older tree's
# writer (its program's first line)
BYTECODE_WRITERS = ("autotuner/base/bytecode_fill.py", "import compileall, importlib.util, json, os, py_compile")


def empty_bytecode(cache_home: Path | None = None) -> None:
    """Empty the folder autotuner.base.bytecode keeps bytecode in (under `cache_home`, where given), once the
    processes a last command left to write there have ended (they would fill it again): as on a host where no
    command ran before."""
    from autotuner.base.bytecode import folder

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
            subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0
            for pattern in BYTECODE_WRITERS):
        time.sleep(0.2)
    shutil.rmtree(cache_home / "autotuner" / "pycache" if cache_home else folder(), ignore_errors=True)


def run(tree: Path, tune: list[str], work: Path, name: str, secret: str, db: str, drop: bool, log: Path,
        spy: int = 0, fresh_bytecode: bool = False, cache_home: Path | None = None) -> dict:
    if fresh_bytecode:
        empty_bytecode(cache_home)
    if drop:
        drop_caches()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
           "TRITON_CACHE_DIR": str(work / f"triton_{name}"), "AUTOTUNER_KERNEL_CACHE_DIR": str(work / f"kept_{name}"),
           "AUTOTUNER_COMPILE_SECRET": secret, "AUTOTUNER_LOCAL_WORKER": "0"}
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    t0 = time.perf_counter()
    command = [sys.executable, "-m", "autotuner", "tune", *tune, "--db", db, "--json"]
    if spy:  # py-spy's samples of the command and its children, collapsed stacks by thread and process
        command = ["py-spy", "record", "-r", str(spy), "-f", "raw", "--subprocesses", "--threads", "-o",
                   str(log.with_suffix(".spy")), "--", *command]
    out = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    log.write_text(out.stderr)
    log.with_suffix(".json").write_text(out.stdout)
    if out.returncode != 0:  # counted and shown; the other runs go on (a tree that fails now and then is a finding)
        last = out.stderr.strip().splitlines()[-1:] or [""]
        return {"failed": f"exit {out.returncode}: {last[0][:200]}", "wall_s": wall}
    # (py-spy writes its own lines to standard output around the command's JSON)
    result = json.JSONDecoder().raw_decode(out.stdout[out.stdout.index("{"):])[0] if spy else json.loads(out.stdout)
    return {"wall_s": wall, **{k: result["phases"].get(k, 0.0) for k in PHASES}, "best_ms": result["best_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", type=Path, help="the source trees (before, after, ...): A, B, ...")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tune", default="matmul --M 4096", help="the tune command's arguments")
    ap.add_argument("--share", action="store_true", help="alone, first and second host of a shared database")
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache before each run (root)")
    ap.add_argument("--spy", type=int, default=0, metavar="RATE",
                    help="record each run with py-spy at RATE samples a second (its walls then count py-spy's cost)")
    ap.add_argument("--fresh-bytecode", action="store_true",
                    help="empty the bytecode autotuner's commands keep before each run (a host's first command)")
    ap.add_argument("--own-bytecode", action="store_true",
                    help="each tree's commands keep their bytecode apart (an XDG_CACHE_HOME a tree)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args()
    trees = [t.resolve() for t in args.trees]
    if not 2 <= len(trees) <= len(string.ascii_uppercase):
        ap.error("give two to 26 source trees")
    for tree in trees:
        if not (tree / "autotuner" / "__main__.py").is_file():
            raise SystemExit(f"{tree} is not a source tree of autotuner (no autotuner/__main__.py)")
    args.out.mkdir(parents=True, exist_ok=True)
    hosts = ("alone", "first", "second") if args.share else ("alone",)
    homes = {tree: Path(tempfile.mkdtemp(prefix="tune_ab_cache_")) if args.own_bytecode else None for tree in trees}
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in range(1, args.rounds + 1):
        for label, tree in zip(string.ascii_uppercase, trees, strict=False):
            work = Path(tempfile.mkdtemp(prefix=f"tune_ab_{label}{r}_"))  # (caches: not under --out)
            shared = f"sqlite:///{work / 'shared.db'}"
            for host in hosts:
                db = f"sqlite:///{work / 'alone.db'}" if host == "alone" else shared
                done = run(tree, shlex.split(args.tune), work, host, "" if host == "alone" else "s3cret-of-16-bytes", db,
                           args.drop_caches, args.out / f"tune_ab_{label}{r}_{host}.log", args.spy,
                           args.fresh_bytecode, homes[tree])
                runs.setdefault((label, host), []).append(done)
                if "failed" in done:
                    print(f"{label}{r} {host:6s} FAILED after {done['wall_s']:.2f} s: {done['failed']}", flush=True)
                    continue
                print(f"{label}{r} {host:6s} wall {done['wall_s']:6.2f}  " +
                      " ".join(f"{k.removesuffix('_s')}={done[k]:.2f}" for k in PHASES) + f"  best {done['best_ms']:.4f}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    names = ", ".join(f"{label} = {tree}" for label, tree in zip(string.ascii_uppercase, trees, strict=False))
    print(f"\n{names}; `autotuner tune {args.tune}`, {args.rounds} rounds interleaved")
    print("| tree | host | walls (s) | mean | setup (mean) | search (mean) | failed |")
    print("|---|---|---|---|---|---|---|")
    for (label, host), every in sorted(runs.items(), key=lambda kv: (hosts.index(kv[0][1]), kv[0][0])):
        each = [d for d in every if "failed" not in d]
        if not each:
            print(f"| {label} | {host} | - | - | - | - | {len(every)} |")
            continue
        walls = [d["wall_s"] for d in each]
        print(f"| {label} | {host} | {' / '.join(f'{w:.2f}' for w in walls)} | {statistics.mean(walls):.2f} | "
              f"{statistics.mean(d['setup_s'] for d in each):.2f} | {statistics.mean(d['search_s'] for d in each):.2f} | "
              f"{len(every) - len(each)} |")


if __name__ == "__main__":
    main()
