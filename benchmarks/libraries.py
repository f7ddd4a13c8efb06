"""Real kernel libraries' autotuned kernels under `python -m autotuner run` against Triton's own autotuner, on a GPU.

Each workload (benchmarks/workloads/*.py: a library's calls forward and backward on model-sized inputs) runs three
times, each in a new process: under Triton's own autotuner with a cold Triton cache; under `python -m autotuner
run` with a new database and a cold Triton cache (the first process: it tunes); and again on that database and
cache (the second process: it should tune nothing; a library's own cache of configs starts empty in each run, so
this one is as another machine on the same database would be). Per run: the wall time, the time from process start to the
first call done, the first call (tuning included) and a steady call; from the switch's report (AUTOTUNER_REPORT),
kernels covered and left to Triton, keys tuned here and reused; and whether every output and gradient equals
Triton's run bit for bit (else the largest difference). Then, per kernel, its first launch in the second process
(the lookup, the kept binary's load and the launch, as the caller waited for it).

With --tests-dir, a library's own tests (pytest arguments in --tests, run in that folder) run twice in new
processes, plainly and under `python -m autotuner run -m pytest` on a new database, and the pass counts are compared
test by test.

    python benchmarks/libraries.py [--workloads liger_dyt,fla_gla,fla_l2norm,flag_gems_ops,tutorial_attention]
        [--train | --train-only] [--json-out FILE] [--keep DIR] [--tests-dir DIR --tests "ARGS"]

With --train, each workload then runs a training-like loop (new tensors every step: benchmarks/workloads/_common.py)
in two more processes, under Triton's own autotuner and under the switch: the memory allocated after 10, 100 and
1000 steps and the time per step (the fastest of five rounds of 200); then a third process times the switch
against Triton on Triton's own configs, 20 rounds of 100 steps each alternating (what differs is only the launch
path).

The libraries are the caller's to install (pinned versions: RESULTS.md says which were measured). With
AUTOTUNER_GPUS=0,1 in the environment, the first process tunes each key on those GPUs at once (against a run
without it: the first process's time on several GPUs; Triton's own runs ignore it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "benchmarks" / "workloads"
PROFILE = False
DEFAULT = ("liger_dyt", "fla_gla", "fla_l2norm", "flag_gems_ops", "tutorial_attention")


def process(argv: list[str], switched: bool, cache: Path, db: str,
            report: Path | None) -> tuple[list[str], dict[str, str]]:
    """A new process's command and environment: plainly (Triton's own autotuner) or under `python -m autotuner
    run`, with a Triton cache and kept binaries of its own, the database `db`, and the switch's report to write."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "AUTOTUNER_DB_URL": db,
           "AUTOTUNER_KERNEL_CACHE_DIR": str(cache / "kept")}
    if report is not None:
        env["AUTOTUNER_REPORT"] = str(report)
    return [sys.executable, *(["-m", "autotuner", "run", "--"] if switched else []), *argv], env


def run_once(script: Path, mode: str, folder: Path, cache: Path, db: str, timeout: int,
             train: bool = False) -> dict[str, Any]:
    out_file, report = folder / f"{mode}.pt", folder / f"{mode}-report.json"
    # plain under Triton; the same-configs process installs the switch itself, after Triton tuned
    cmd, env = process([str(script)], "triton" not in mode and mode != "same-configs", cache, db, report)
    if train:  # benchmarks/workloads/_common.py's loops: new tensors every step
        env["WORKLOAD_MODE"] = "same_configs" if mode == "same-configs" else "train"
    # a library's own cache of tuned configs, new in each run: the second process is as another machine sharing
    # the database would be (FlagGems keeps one; FLA's is off unless FLA_CACHE_MODE is set)
    env.update(WORKLOAD_OUT=str(out_file), FLAGGEMS_CACHE_DIR=str(folder / f"{mode}-flaggems"))
    if PROFILE:  # the first call's profile (its times then include the profiler's own cost)
        env["WORKLOAD_PROFILE"] = str(folder / f"{mode}-profile.log")
    env["WORKLOAD_START"] = repr(time.time())
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "wall_s": time.perf_counter() - t0, "ok": False, "error": f"stopped after {timeout} s"}
    wall = time.perf_counter() - t0
    (folder / f"{mode}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    row: dict[str, Any] = {"mode": mode, "wall_s": wall, "ok": proc.returncode == 0}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
        return row
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    if train:
        return row
    if report.exists():
        kernels = json.loads(report.read_text())
        sources = [s for k in kernels if k["covered"] for s in k["keys"].values()]
        row.update(kernels=len(kernels), covered=sum(k["covered"] for k in kernels),
                   left={k["name"]: k["how"] for k in kernels if not k["covered"]},
                   keys_tuned_here=sum(k["tuned_here"] for k in kernels),
                   keys_reused=sum(s.startswith(("exact", "Triton's own cache", "reused")) for s in sources),
                   tuning_s=sum(k["tuning_s"] for k in kernels),
                   first_calls={k["name"]: k["first_call_s"] for k in kernels if k.get("first_call_s") is not None})
    return row


def compare(a: Path, b: Path) -> str:
    import torch

    if not (a.exists() and b.exists()):
        return "-"
    x, y = torch.load(a), torch.load(b)

    def same(u: torch.Tensor, v: torch.Tensor) -> bool:  # bit for bit (NaNs, and the sign of zero, included)
        return u.shape == v.shape and u.dtype == v.dtype and torch.equal(u.contiguous().view(torch.uint8),
                                                                          v.contiguous().view(torch.uint8))

    def largest(u: torch.Tensor, v: torch.Tensor) -> float:  # NaN in both places: no difference; in one: inf
        d = (u.float() - v.float()).abs()
        return d.masked_fill(u.isnan() & v.isnan(), 0).nan_to_num(nan=float("inf")).max().item()

    diffs = {n: largest(x[n], y[n]) for n in x if not same(x[n], y[n])}
    return "bit-identical" if not diffs else "differs: " + ", ".join(f"{n} {d:.3g}" for n, d in diffs.items())


def header(*columns: str) -> None:
    """A markdown table's header and separator, after an empty line."""
    print("\n| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))


def print_train(trains: list[dict[str, Any]]) -> None:
    """The training-like loops' table: memory allocated after 10, 100 and 1000 steps, its growth, ms per step."""
    header("workload", "run", "MiB after 10 / 100 / 1000 steps", "growth MiB", "ms per step", "vs Triton")
    plain = {r["workload"]: r.get("step_ms") for r in trains if r["mode"] == "train-triton" and r["ok"]}
    same = [r for r in trains if r["mode"] == "same-configs"]
    for r in trains:
        if r["mode"] == "same-configs":
            continue
        if not r["ok"]:
            print(f"| {r['workload']} | {r['mode']} | failed: {r['error']} | | | |")
            continue
        mem = " / ".join(f"{v:.1f}" for v in r["memory_mib"].values())
        base = plain.get(r["workload"])
        ratio = f"{r['step_ms'] / base:.3f}x" if base else "-"
        print(f"| {r['workload']} | {r['mode'][6:]} | {mem} | {r['growth_mib']:+.1f} | {r['step_ms']:.3f} | {ratio} |")
    if same:
        print("\nthe same configs (Triton's), one process, rounds alternating:", end="")
        header("workload", "Triton ms per step", "switch ms per step", "switch / Triton",
               "paired rounds' median (quartiles)", "where the switch's configs came from")
        for r in same:
            if not r["ok"]:
                print(f"| {r['workload']} | failed: {r['error']} | | | | |")
                continue
            quartiles = "-".join(f"{q:.3f}" for q in r.get("paired_quartiles", []))
            print(f"| {r['workload']} | {r['triton_ms']:.3f} | {r['switch_ms']:.3f} | "
                  f"{r['switch_ms'] / r['triton_ms']:.3f}x | {r['paired_median']:.3f}x ({quartiles}) | "
                  f"{'; '.join(s[:40] for s in r['sources'])} |")


def library_tests(folder: Path, tests: str, timeout: int, work: Path) -> dict[str, Any]:
    """The library's tests plainly and under the switch, in two new processes side by side on the GPU (the outcomes
    are compared, not the times): counts, and the tests whose outcome differs. A run past `timeout` is stopped and
    what it finished is counted (pytest -v's lines)."""
    import re
    import shlex

    results: dict[str, Any] = {}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    procs = {}
    for mode in ("triton", "switch"):
        switched = mode == "switch"
        cmd, env = process(["-m", "pytest", "-v", "-p", "no:cacheprovider", *shlex.split(tests)], switched,
                           work / f"cache-{mode}", f"sqlite:///{work / 'autotuner.db'}",
                           work / f"{mode}-report.json" if switched else None)
        log = (work / f"{mode}.log").open("w")
        procs[mode] = (subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, text=True),
                       time.perf_counter(), log)
    ended: dict[str, tuple[int | str, float]] = {}
    while len(ended) < len(procs):  # each run's own wall time, though they end in either order
        for mode, (proc, t0, log) in procs.items():
            if mode in ended:
                continue
            code: int | str | None = proc.poll()
            if code is None and time.perf_counter() - t0 > timeout:
                proc.kill()
                proc.wait()
                code = f"stopped after {timeout} s"
            if code is not None:
                log.close()
                ended[mode] = code, time.perf_counter() - t0
        time.sleep(0.5)
    for mode in procs:
        code, wall = ended[mode]
        text = (work / f"{mode}.log").read_text()
        outcomes = {m.group(1): m.group(2).lower() for m in re.finditer(
            r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", text, re.MULTILINE)}
        report = work / f"{mode}-report.json"
        kernels = json.loads(report.read_text()) if report.exists() else []
        results[mode] = {"wall_s": wall, "returncode": code, "outcomes": outcomes,
                         "counts": {o: sum(v == o for v in outcomes.values())
                                    for o in ("passed", "failed", "error", "skipped")},
                         "kernels": len(kernels), "covered": sum(k["covered"] for k in kernels),
                         "keys_tuned_here": sum(k["tuned_here"] for k in kernels),
                         "tail": (text.strip().splitlines() or ["?"])[-1][:200]}
    a, b = results["triton"]["outcomes"], results["switch"]["outcomes"]
    results["differ"] = {t: (a.get(t), b.get(t)) for t in sorted(set(a) | set(b)) if a.get(t) != b.get(t)}
    results["logs"] = str(work)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT), help="names in benchmarks/workloads, or script paths")
    ap.add_argument("--json-out")
    ap.add_argument("--keep", help="keep each run's logs, outputs and reports here")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--tests-dir", help="a library's source folder whose tests to run (see --tests)")
    ap.add_argument("--tests", default="", help="pytest arguments, run in --tests-dir")
    ap.add_argument("--tests-timeout", type=int, default=900, help="seconds each test run may take")
    ap.add_argument("--profile", action="store_true", help="profile each run's first call (to *-profile.log)")
    ap.add_argument("--train", action="store_true", help="then each workload's training-like loop, under Triton's "
                    "own autotuner and under the switch (on the database the runs before filled)")
    ap.add_argument("--loops", default="train,same", help="with --train: the training-like loops (train) and the "
                    "same-configs comparison (same), or one of them")
    ap.add_argument("--train-only", action="store_true", help="only the training-like loops (the switch tunes in "
                    "its first steps)")
    args = ap.parse_args()
    global PROFILE
    PROFILE = args.profile
    rows: list[dict[str, Any]] = []
    trains: list[dict[str, Any]] = []
    for name in filter(None, args.workloads.split(",")):
        script = Path(name) if name.endswith(".py") else WORKLOADS / f"{name}.py"
        folder = Path(args.keep) / script.stem if args.keep else Path(tempfile.mkdtemp(prefix=f"{script.stem}-"))
        folder.mkdir(parents=True, exist_ok=True)
        db = f"sqlite:///{folder / 'autotuner.db'}"
        for stale in (folder / "autotuner.db", folder / "cache-triton", folder / "cache-autotuner"):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
        runs = () if args.train_only else (("triton", "cache-triton"), ("first", "cache-autotuner"),
                                              ("second", "cache-autotuner"))
        for mode, cache in runs:
            row = {"workload": script.stem, **run_once(script, mode, folder, folder / cache, db, args.timeout)}
            if mode != "triton":
                row["outputs_vs_triton"] = compare(folder / "triton.pt", folder / f"{mode}.pt")
            rows.append(row)
            print(json.dumps(row), flush=True)
            if mode == "triton" and not row["ok"]:
                break  # nothing to compare against
        if any(r["workload"] == script.stem and r.get("outputs_vs_triton", "bit-identical") != "bit-identical"
               for r in rows):
            # Triton's own choice varies between runs (its timings are noisy), and a reduction's result with it:
            # a second cold run under Triton says whether its outputs hold still without autotuner
            again = {"workload": script.stem, **run_once(script, "triton-again", folder, folder / "cache-triton2",
                                                        db, args.timeout)}
            again["outputs_vs_triton"] = compare(folder / "triton.pt", folder / "triton-again.pt")
            rows.append(again)
            print(json.dumps(again), flush=True)
        if args.train or args.train_only:
            loops = {"train": (("train-triton", "cache-triton"), ("train-switch", "cache-autotuner")),
                     "same": (("same-configs", "cache-triton"),)}
            for mode, cache in [m for loop in args.loops.split(",") for m in loops[loop]]:
                row = {"workload": script.stem, **run_once(script, mode, folder, folder / cache, db, args.timeout,
                                                           train=True)}
                trains.append(row)
                print(json.dumps(row), flush=True)
    tests = None
    if args.tests_dir:
        work = Path(args.keep) / "library-tests" if args.keep else Path(tempfile.mkdtemp(prefix="library-tests-"))
        tests = library_tests(Path(args.tests_dir), args.tests, args.tests_timeout, work)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"workloads": rows, "train": trains, "library_tests": tests},
                                                  indent=1))
    if trains:
        print_train(trains)
    header("workload", "run", "wall s", "start to first call done s", "first call s", "steady ms (again)",
           "covered / met", "keys tuned here / reused", "outputs vs triton")
    for r in rows:
        if not r["ok"]:
            print(f"| {r['workload']} | {r['mode']} | {r['wall_s']:.1f} | failed: {r['error']} | | | | | |")
            continue
        met = f"{r['covered']} / {r['kernels']}" if "kernels" in r else "-"
        keys = f"{r['keys_tuned_here']} / {r['keys_reused']}" if "kernels" in r else "-"
        print(f"| {r['workload']} | {r['mode']} | {r['wall_s']:.1f} | {r['started_to_first_done_s']:.2f} | "
              f"{r['first_call_s']:.3f} | {r['steady_ms']:.3f} ({r.get('steady_again_ms', float('nan')):.3f}) | {met} | {keys} | {r.get('outputs_vs_triton', '')} |")
    for r in rows:
        for kernel, how in (r.get("left") or {}).items():
            print(f"left to Triton in {r['workload']} ({r['mode']}): {kernel}: {how}")
    firsts = [(r["workload"], k, s) for r in rows if r["mode"] == "second" for k, s in r.get("first_calls", {}).items()]
    if firsts:
        print("\nfirst launch of each covered kernel in the second process (ms): "
              f"max {max(s for *_, s in firsts) * 1e3:.1f}, over 50 ms: {sum(s > 0.05 for *_, s in firsts)} of "
              f"{len(firsts)}")
        for workload, kernel, s in sorted(firsts, key=lambda f: -f[2]):
            print(f"  {workload} {kernel} {s * 1e3:.1f}")
    if tests:
        print(f"\nlibrary tests ({args.tests_dir}: {args.tests})")
        for mode in ("triton", "switch"):
            t = tests[mode]
            print(f"  {mode}: {t['counts']} in {t['wall_s']:.0f} s, kernels covered {t['covered']} / "
                  f"{t['kernels']}, keys tuned {t['keys_tuned_here']}; {t['tail']}")
        print(f"  outcomes that differ: {tests['differ'] or 'none'}")


if __name__ == "__main__":
    main()
