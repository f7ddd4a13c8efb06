"""A workload's shapes, not one: a stream of matmul calls whose M changes on every call, as a serving process's
token counts do. N = K = 4096, float16; M drawn from a long-tailed distribution over 1..8192 (log-normal: median
32, sigma 2.0 in log space, clipped to 1..8192; seeded), 2000 calls.

Cases, each in a new process with a database of its own:

    a    the Triton tutorial's matmul under @triton.autotune (its 8-config list, key M, N, K)
    b    the same kernel under @autotuner.autotune, on_miss=tune: every new key tuned on the launching thread
         (DYNAMIC_DEADLINE_S: stop the stream after that many seconds, and say how many calls were made)
    c    the same under @autotuner.autotune, on_miss=nearest, after a pow2 sweep of M (1..8192, 14 points) tuned
         with `autotuner tune ... --shape M=1-8192:pow2,N=4096,K=4096` from recorded calls: nothing tuned inline
    lib  autotuner.matmul after `autotuner tune matmul --M 1-8192:pow2 --N 4096 --K 4096` (pow2 buckets of M),
         AUTOTUNER_ON_MISS=nearest

Each case reports the stream's wall time, the tunings run on the launching thread, and its regret: on a sample
of M values from the stream, the config it launched timed against that M's own best, interleaved with CUDA
events (a-c: the best of the 8-config list, timed exhaustively; lib: the winner of a 64-trial tuning of that M).

    python benchmarks/dynamic_shapes.py --cases a,b,c,lib --out DIR     # on a GPU; each case's JSON in DIR
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

import autotuner  # noqa: E402  (first: picks the interpreter where there is no GPU)
from examples.tutorial_matmul import get_autotune_config, matmul_kernel  # noqa: E402

N = K = int(os.environ.get("DYNAMIC_NK", "4096"))  # smaller for a smoke run in the interpreter
M_MAX = int(os.environ.get("DYNAMIC_M_MAX", "8192"))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32
NAME = "benchmarks.dynamic_shapes:mm_nearest"
# The kernel a sweep tunes from recorded calls: importable by its name, so `autotuner tune` and the workers reach
# it (a new process imports this module).
mm_nearest = autotuner.autotune(configs=get_autotune_config(), key=["M", "N", "K"], name=NAME)(matmul_kernel.fn)


def timed(fn: Any, warmup_ms: float = 5, rep_ms: float = 20) -> float:
    """A launch's median time: CUDA events on a GPU, the wall clock in the interpreter."""
    from autotuner.engine.timing import time_cuda, time_fn

    return (time_cuda(fn, warmup_ms, rep_ms) if DEVICE == "cuda" else time_fn(fn, True, warmup_ms, rep_ms)).median_ms


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def stream(calls: int, seed: int = 0) -> list[int]:
    """The M of each call: log-normal (median 32, sigma 2.0), clipped to 1..8192."""
    r = random.Random(seed)
    return [min(M_MAX, max(1, int(r.lognormvariate(math.log(32), 2.0)))) for _ in range(calls)]


def sample(ms: list[int], n: int, seed: int = 1) -> list[int]:
    """n distinct M values of the stream, drawn as the stream draws them (frequent ones more often)."""
    r, seen = random.Random(seed), list(dict.fromkeys(ms))
    weights = {m: ms.count(m) for m in seen}
    out: list[int] = []
    while len(out) < min(n, len(seen)):
        m = r.choices(seen, [weights[x] for x in seen])[0]
        if m not in out:
            out.append(m)
    return sorted(out)


class Operands:
    def __init__(self) -> None:
        g = torch.Generator(device="cpu").manual_seed(0)
        self.a = torch.randn(M_MAX, K, generator=g).to(DEVICE, DTYPE)
        self.b = torch.randn(K, N, generator=g).to(DEVICE, DTYPE)

    def launch(self, kernel: Any, m: int, **config: Any) -> torch.Tensor:
        a = self.a[:m]
        c = torch.empty(m, N, device=DEVICE, dtype=DTYPE)

        def grid(meta: dict[str, Any]) -> tuple[int]:
            return (triton.cdiv(m, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

        kernel[grid](a, self.b, c, m, N, K, a.stride(0), a.stride(1), self.b.stride(0), self.b.stride(1), c.stride(0),
                     c.stride(1), **config)
        return c


def run_stream(ms: list[int], call: Any, deadline_s: float | None = None) -> tuple[float, int]:
    """The stream's wall time and the calls made: all of them, or those made before `deadline_s` ran out."""
    sync()
    t0 = time.perf_counter()
    done = 0
    for m in ms:
        call(m)
        done += 1
        if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
            break
    sync()
    return time.perf_counter() - t0, done


def list_regret(ops: Operands, chosen: dict[int, dict[str, Any]], rounds: int = 5) -> list[dict[str, Any]]:
    """Each sampled M's chosen config against the best of the 8-config list on it, all timed interleaved."""
    from autotuner.decorator.configs import config_dict
    from autotuner.engine.timing import rotation

    configs = [config_dict(c) for c in get_autotune_config()]
    out = []
    for m, config in chosen.items():
        times: dict[int, list[float]] = {i: [] for i in range(len(configs))}
        for r in range(rounds):
            for i in rotation(list(range(len(configs))), r):
                times[i].append(timed(functools.partial(ops.launch, matmul_kernel.fn, m, **configs[i])))
        med = {i: statistics.median(t) for i, t in times.items()}
        mine = next(i for i, c in enumerate(configs) if c == config)
        best = min(med, key=med.__getitem__)
        out.append({"M": m, "chosen": config, "chosen_ms": med[mine], "best": configs[best], "best_ms": med[best],
                    "regret": med[mine] / med[best] - 1})
    return out


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def summary(regrets: list[dict[str, Any]]) -> dict[str, float]:
    ratios = [1 + r["regret"] for r in regrets]
    return {"geomean_regret": math.exp(statistics.mean(math.log(x) for x in ratios)) - 1,
            "worst_regret": max(ratios) - 1, "sampled": len(ratios)}


# -- the cases, each in its own process ---------------------------------------------------------------------------
def case_a(ms: list[int], picks: list[int]) -> dict[str, Any]:
    ops = Operands()
    theirs = triton.autotune(configs=get_autotune_config(), key=["M", "N", "K"])(triton.jit(matmul_kernel.fn.fn))
    wall, _ = run_stream(ms, lambda m: ops.launch(theirs, m))
    chosen = {}
    for key, config in theirs.cache.items():
        if key[0] in picks:
            chosen[key[0]] = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    regrets = list_regret(ops, chosen)
    return {"wall_s": wall, "inline_tunings": len(theirs.cache), "regrets": regrets, **summary(regrets)}


def _decorated_case(ms: list[int], picks: list[int], kernel: Any) -> dict[str, Any]:
    from autotuner.decorator import autotuned
    from autotuner.decorator import miss as policy

    ops = Operands()
    resolve_s: list[float] = []  # each new key's resolution on the launching thread
    real = policy.resolve_miss

    def timed_resolve(view: policy.EngineView, miss: policy.Miss) -> policy.Answer:
        t0 = time.perf_counter()
        try:
            return real(view, miss)
        finally:
            resolve_s.append(time.perf_counter() - t0)

    autotuned.resolve_miss = timed_resolve  # the name Autotuned calls
    deadline = float(os.environ["DYNAMIC_DEADLINE_S"]) if os.environ.get("DYNAMIC_DEADLINE_S") else None
    wall, done = run_stream(ms, lambda m: ops.launch(kernel, m), deadline)
    kinds = [s.split()[0] for s in kernel.sources.values()]  # exact, nearest, default, tuned (here), stale
    chosen = {key[0]: dict(entry[0]) for key, entry in kernel.cache.items() if key[0] in picks}
    regrets = list_regret(ops, chosen)
    return {"wall_s": wall, "calls_done": done, "inline_tunings": kinds.count("tuned"), "keys": len(kinds),
            "sources": {k: kinds.count(k) for k in sorted(set(kinds))},
            "resolve_ms": {"first": resolve_s[0] * 1e3, **{f"p{q}": quantile(resolve_s[1:], q / 100) * 1e3
                                                            for q in (50, 90, 99)}, "max_after_first":
                           max(resolve_s[1:], default=0.0) * 1e3},
            "regrets": regrets, **summary(regrets)}


def case_b(ms: list[int], picks: list[int]) -> dict[str, Any]:
    kernel = autotuner.autotune(configs=get_autotune_config(), key=["M", "N", "K"], name="bench:mm_tune",
                                on_miss="tune")(matmul_kernel.fn)
    return _decorated_case(ms, picks, kernel)


def case_c(ms: list[int], picks: list[int]) -> dict[str, Any]:
    return _decorated_case(ms, picks, mm_nearest)


def record_pow2() -> None:
    """Launch the kernel once at each power-of-two M (on_miss=default records the call and queues a job)."""
    ops = Operands()
    for k in range(M_MAX.bit_length()):
        ops.launch(mm_nearest, 1 << k)
    sync()


def case_lib(ms: list[int], picks: list[int]) -> dict[str, Any]:
    from autotuner.base.device import current_device
    from autotuner.base.registry import get_op
    from autotuner.launch import lookup
    from autotuner.store.database import Store
    from kernels import matmul as k_matmul

    ops = Operands()
    sources: list[str] = []
    real = lookup.Resolver.resolve

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        res = real(self, *a, **kw)
        sources.append(res.source)
        return res

    lookup.Resolver.resolve = counted  # type: ignore[method-assign]
    wall, _ = run_stream(ms, lambda m: autotuner.matmul(ops.a[:m], ops.b))
    lookup.Resolver.resolve = real  # type: ignore[method-assign]
    # the own best of each sampled M: a 64-trial tuning of it, after the stream
    db = os.environ["AUTOTUNER_DB_URL"]
    op, device, store = get_op("matmul"), current_device(), Store(db)
    regrets = []
    for m in picks:
        problem = op.parse_problem(f"{m}x{N}x{K}", str(DTYPE).removeprefix("torch."))
        served = lookup.resolve(op, problem, device, store=store)
        subprocess.run([sys.executable, "-m", "autotuner", "tune", "matmul", "--M", str(m), "--N", str(N), "--K",
                        str(K), "--dtype", str(DTYPE).removeprefix("torch."), "--trials", "64", "--db", db, "-q"],
                       check=True, cwd=ROOT, capture_output=True)
        own = store.best(op=op, problem=problem, device=device)
        assert own is not None
        a = ops.a[:m]
        launches = {name: k_matmul.prepare(a, ops.b, cfg) for name, cfg in (("served", served.config),
                                                                              ("own", own.config))}
        times: dict[str, list[float]] = {n: [] for n in launches}
        for _ in range(5):
            for name, launch in launches.items():
                times[name].append(timed(functools.partial(launch, a, ops.b, None)))
        med = {n: statistics.median(t) for n, t in times.items()}
        regrets.append({"M": m, "source": served.source, "from": served.from_problem, "chosen": served.config,
                        "chosen_ms": med["served"], "best": own.config, "best_ms": med["own"],
                        "regret": med["served"] / med["own"] - 1})
    return {"wall_s": wall, "inline_tunings": 0, "resolutions": {s: sources.count(s) for s in set(sources)},
            "regrets": regrets, **summary(regrets)}


CASES = {"a": case_a, "b": case_b, "c": case_c, "lib": case_lib}


def child(case: str, calls: int, picks: int) -> None:
    ms = stream(calls)
    result = CASES[case](ms, sample(ms, picks if case != "lib" else max(1, picks // 2)))
    result.update(case=case, calls=calls, distinct_m=len(set(ms)))
    print("RESULT " + json.dumps(result, default=str))


def in_process(case: str, env: dict[str, str], calls: int, picks: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", case, "--calls", str(calls), "--sample", str(picks)],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode != 0:
        raise RuntimeError(f"case {case} failed:\n{out.stderr[-4000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def timed_command(args: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "autotuner", *args], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **env})
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return time.perf_counter() - t0, json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="a,b,c,lib")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sample", type=int, default=20, help="M values to measure the regret on (lib: half)")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.calls, args.sample)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for case in args.cases.split(","):
        tmp = tempfile.mkdtemp()
        env = {"AUTOTUNER_DB_URL": f"sqlite:///{tmp}/{case}.db", "AUTOTUNER_KERNEL_CACHE_DIR": f"{tmp}/kept"}
        extra: dict[str, Any] = {}
        if case == "c":
            in_process_record(env)
            extra["sweep_s"], sweep = timed_command(
                ["tune", NAME, "--shape", f"M=1-{M_MAX}:pow2,N={N},K={K}", "--dtype", str(DTYPE).removeprefix("torch."),
                 "--json", "-q"], env)
            extra["sweep_points"] = len(sweep["points"])
            env["AUTOTUNER_ON_MISS"] = "nearest"
        if case == "lib":
            extra["sweep_s"], sweep = timed_command(
                ["tune", "matmul", "--M", f"1-{M_MAX}:pow2", "--N", str(N), "--K", str(K), "--dtype",
                 str(DTYPE).removeprefix("torch."), "--json", "-q"], env)
            extra["sweep_points"] = len(sweep["points"])
            env["AUTOTUNER_ON_MISS"] = "nearest"
        result = {**in_process(case, env, args.calls, args.sample), **extra}
        (args.out / f"dynamic_{case}.json").write_text(json.dumps(result, indent=1, default=str))
        cut = f" (stopped at DYNAMIC_DEADLINE_S after {result['calls_done']} calls)" \
            if result.get("calls_done", args.calls) < args.calls else ""
        print(f"{case}: stream {result['wall_s']:.1f} s{cut}, {result['inline_tunings']} inline tunings, regret geomean "
              f"{result['geomean_regret']:+.2%} worst {result['worst_regret']:+.2%} over {result['sampled']} M"
              + (f", sweep {extra['sweep_s']:.0f} s ({extra['sweep_points']} points)" if extra else ""), flush=True)


def in_process_record(env: dict[str, str]) -> None:
    out = subprocess.run([sys.executable, __file__, "--child-record"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **env, "AUTOTUNER_ON_MISS": "default"})
    if out.returncode != 0:
        raise RuntimeError(f"recording failed:\n{out.stderr[-4000:]}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-record"]:
        record_pow2()
    else:
        main()
