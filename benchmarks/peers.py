"""Three tuners side by side on one host, each in new processes: time to a tuned matmul, and its speed against cuBLAS.

    autotuner        `autotuner tune matmul --M 4096 --N 4096 --K 4096` (its trial worker and compile pool
                     included), then a new process's first `autotuner.matmul(a, b)`
    triton.autotune  Triton's tutorial kernel under `@triton.autotune` with the tutorial's configs (the source of
                     examples/tutorial_matmul.py with its decorator line put back): the first call tunes
    inductor         `torch.compile(torch.mm, mode="max-autotune")`: the first call benchmarks its choices

Each tuner runs three ways: `cold` (empty Triton, Inductor and autotuner caches, a new database), `warm` (the same
caches again, a new process) and, for autotuner, `shared` (a second host: a new Triton cache and kernel cache, the
same database with AUTOTUNER_COMPILE_SECRET, so compiles come from the first host's). Reported per run: `to tuned`
(from the process's start until the tuned kernel could launch: the command's exit for autotuner, the end of the first
call for the others), `first call` (the first call's own time in the process that makes it) and the tuned kernel's
speed as cuBLAS's time over its own (median of interleaved rounds, L2 flushed; above 1 is faster). On a host whose
torch has no bytecode, autotuner's commands read the bytecode an earlier command left (autotuner.base.bytecode):
`--fresh-bytecode` empties it before each of autotuner's runs, so that each is a new host's first command.

    python benchmarks/peers.py [--M 4096 --N 4096 --K 4096] [--dtype float16] [--fresh-bytecode] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TUNERS = ("autotuner", "triton.autotune", "inductor")


def child(tuner: str, m: int, n: int, k: int, dtype_name: str, started: float) -> None:
    """One process of one tuner: its first call (after tuning, for autotuner), then speeds; a JSON line."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    if tuner == "autotuner":
        import autotuner

        def fn(x: Any, y: Any) -> Any:
            return autotuner.matmul(x, y)
    elif tuner == "triton.autotune":
        source = (ROOT / "examples/tutorial_matmul.py").read_text()
        source = source.replace("@autotuner.autotune(", "@triton.autotune(").replace("import autotuner\n", "")
        folder = Path(tempfile.mkdtemp())
        (folder / "tutorial_triton.py").write_text(source)
        sys.path.insert(0, str(folder))
        import tutorial_triton  # type: ignore[import-not-found]

        fn = tutorial_triton.matmul
    else:
        fn = torch.compile(lambda x, y: torch.mm(x, y), mode="max-autotune")
    torch.cuda.synchronize()
    t0 = time.time()
    out = fn(a, b)
    torch.cuda.synchronize()
    first = time.time() - t0
    ready = time.time() - started
    ref = torch.mm(a, b)
    close = bool(torch.allclose(out.float(), ref.float(), atol=0.05 * k ** 0.5, rtol=0.02))

    from autotuner.engine.measure.timing import interleaved, time_cuda

    calls = {"ours": lambda: fn(a, b), "cublas": lambda: torch.mm(a, b)}
    rounds = interleaved(list(calls), 5, lambda key: time_cuda(calls[key], warmup_ms=25, rep_ms=100).median_ms)
    ms = {key: sorted(v)[len(v) // 2] for key, v in rounds.items()}
    print(json.dumps({"first_call_s": first, "ready_s": ready, "ms": ms["ours"], "cublas_ms": ms["cublas"],
                      "vs_cublas": ms["cublas"] / ms["ours"], "correct": close}), flush=True)


def run(args: list[str], env: dict[str, str], timeout: float = 900) -> tuple[float, str]:
    started = time.time()
    out = subprocess.run(args, env={**env, "PEERS_STARTED": repr(started)}, capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    wall = time.time() - started
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return wall, out.stdout


def measure(tuner: str, how: str, dirs: dict[str, str], opts: argparse.Namespace, share: bool) -> dict[str, Any]:
    env = {**os.environ, "TRITON_CACHE_DIR": dirs["triton"], "TORCHINDUCTOR_CACHE_DIR": dirs["inductor"],
           "AUTOTUNER_DB_URL": f"sqlite:///{dirs['db']}", "AUTOTUNER_KERNEL_CACHE_DIR": dirs["kernels"],
           "AUTOTUNER_LOCAL_WORKER": "0"}
    if share:  # the first host keeps its compiles for the second
        env["AUTOTUNER_COMPILE_SECRET"] = "peers-benchmark-" + "0" * 32  # the hosts share it
    probe = [sys.executable, str(Path(__file__).resolve()), "--child", tuner, "--M", str(opts.M), "--N", str(opts.N),
             "--K", str(opts.K), "--dtype", opts.dtype]
    row: dict[str, Any] = {"tuner": tuner, "how": how}
    if tuner == "autotuner":
        if opts.fresh_bytecode:
            from benchmarks.tune_ab import empty_bytecode

            empty_bytecode()
        wall, _ = run([sys.executable, "-m", "autotuner", "tune", "matmul", "--M", str(opts.M), "--N", str(opts.N),
                       "--K", str(opts.K), "--dtype", opts.dtype, "--here"], env)
        row["to_tuned_s"] = wall
        _, out = run(probe, env)
        row.update(json.loads(out.strip().splitlines()[-1]))
    else:
        _, out = run(probe, env)
        row.update(json.loads(out.strip().splitlines()[-1]))
        row["to_tuned_s"] = row["ready_s"]
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--K", type=int, default=4096)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--tuners", default=",".join(TUNERS))
    parser.add_argument("--child")
    parser.add_argument("--fresh-bytecode", action="store_true",
                        help="empty the bytecode autotuner's commands keep before each of its runs")
    parser.add_argument("--json-out", type=Path)
    opts = parser.parse_args()
    if opts.child:
        child(opts.child, opts.M, opts.N, opts.K, opts.dtype, float(os.environ["PEERS_STARTED"]))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tuner in opts.tuners.split(","):
            base = Path(tmp) / tuner
            dirs = {name: str(base / name) for name in ("triton", "inductor", "kernels")}
            dirs["db"] = str(base / "autotuner.db")
            hows = ["cold", "warm", "shared"] if tuner == "autotuner" else ["cold", "warm"]
            for how in hows:
                if how == "shared":  # a second host: its own Triton and kernel caches, the first host's database
                    dirs = {**dirs, "triton": str(base / "triton2"), "kernels": str(base / "kernels2")}
                    import sqlite3

                    with sqlite3.connect(dirs["db"]) as con:  # only the compiles are the first host's
                        for table in ("best_configs", "trials", "tuning_runs", "jobs"):
                            con.execute(f"DELETE FROM {table}")
                rows.append(measure(tuner, how, dirs, opts, share=tuner == "autotuner"))
    import torch

    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {__import__('triton').__version__}; matmul {opts.M}x{opts.N}x{opts.K} {opts.dtype}\n")
    print("| tuner | caches | to tuned (s) | first call (s) | ms | cuBLAS ms | vs cuBLAS | correct |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tuner']} | {r['how']} | {r['to_tuned_s']:.2f} | {r['first_call_s']:.2f} | {r['ms']:.4f} | "
              f"{r['cublas_ms']:.4f} | {r['vs_cublas']:.3f}x | {r['correct']} |")
    if opts.json_out:
        opts.json_out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
