"""Refined sweeps and the serving rule, measured on held-back keys of kernels written as libraries write them (not
ours, and their spaces not tuned for this): what serving an M nobody tuned costs after a power-of-two sweep, and
after the sweep refined itself (autotuner.engine.sweeps.refine) to a 2% target.

One GPU pass per kernel times every config of its list (CUDA-graph replays: shape_kernels.Launcher.time) on every M of a grid: the
power-of-two points, every log-midpoint refinement could ask for (three levels deep: seven per octave), and keys
held back from all of those (log-uniform, seeded). From that landscape, offline and with the repository's own
refinement code: each point's winner (its best config), each winner's loss on its neighbours (the cross timing),
the refinement's midpoints, added until every neighbouring pair is within the target or the point budget (as many
points as the sweep names) is spent; then each held-back key served by the nearest point's winner and by the
interval rule (autotuner.store.regret), and its regret against that key's own best config.

    lib_matmul     a tiled bf16 matmul (12 configs of BLOCK_M/N, warps, stages), N = K = 4096, M = 16..4096
    small_k        the same kernel and configs at N = 1024, K = 256: few tiles, so the best changes sharply with M
    rms_rows       an RMSNorm over rows of 4096 with ROWS rows per program (16 configs of ROWS and warps),
                   M = 256..65536: the best rows per program changes with M
(benchmarks/shape_kernels.py holds them.)

    python benchmarks/refine_regret.py [--out DIR] [--kernels lib_matmul,small_k,rms_rows]     # on a GPU
    python benchmarks/refine_regret.py --from DIR     # the same analysis of a GPU run's landscapes, anywhere
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autotuner.engine.sweeps.cross_time import Cell  # noqa: E402
from autotuner.engine.sweeps.predict import predict  # noqa: E402
from autotuner.engine.sweeps.refine import (  # noqa: E402
    DEFAULT_TARGET,
    insert_points,
    midpoint_shape,
    neighbour_losses,
    refinements,
    stale_points,
    worst_pair,
)
from autotuner.store.prediction import MODEL  # noqa: E402
from benchmarks.shape_kernels import KERNELS as SHAPE_KERNELS  # noqa: E402
from benchmarks.shape_kernels import Launcher  # noqa: E402
from search_spaces.problem import ProblemError  # noqa: E402
from search_spaces.space import config_key  # noqa: E402

DEPTH = 3  # midpoint levels timed between two powers of two: refinement may go this deep
HELD_BACK = 24  # keys per kernel, log-uniform between its first and last point, none on the grid


KERNELS: dict[str, dict[str, Any]] = {name: {**spec, "timer": functools.partial(lambda s: Launcher(s).time, spec)}
                                     for name, spec in SHAPE_KERNELS.items()}
REP_MS = 20.0  # each config's CUDA graph holds about this many milliseconds of launches (--rep)


class Point:
    """A swept M as the refinement code reads a problem: a key and a shape."""

    def __init__(self, m: int) -> None:
        self.m, self.key, self.shape = m, f"M={m}", f"M={m}"

    def dims(self) -> tuple[int]:
        return (self.m,)


def grid_of(low: int, high: int) -> tuple[list[int], list[int]]:
    """The powers of two from low to high, and every midpoint refinement could ask for, DEPTH levels deep."""
    pow2 = [1 << e for e in range(low.bit_length() - 1, high.bit_length())]
    found: set[int] = set()
    level = list(pow2)
    for _ in range(DEPTH):
        mids = [int(str(midpoint_shape(f"M={a}", f"M={b}")).split("=")[1])
                for a, b in zip(level, level[1:], strict=False) if b - a >= 2]
        found |= set(mids)
        level = sorted({*level, *mids})
    return pow2, sorted(found)


def simulate(times: dict[int, list[float]], configs: list[dict[str, int]], pow2: list[int],
             target: float | None) -> tuple[list[int], list[int]]:
    """The sweep's points after refinement to `target` (None: the powers of two alone), as the engine runs it,
    with the landscape standing in for tuning (a point's best config) and cross timing (a config's time there);
    and the points refinement added."""
    points = [Point(m) for m in pow2]
    added: list[int] = []
    tried: set[str] = set()
    winner = {m: min(range(len(configs)), key=lambda i: times[m][i]) for m in times}

    def cells_for(pts: list[Point]) -> list[Cell]:
        out = []
        for j, on in enumerate(pts):
            for i in range(max(0, j - 1), min(len(pts), j + 2)):
                out.append(Cell(winner_key=pts[i].key, on_key=on.key, config=configs[winner[pts[i].m]],
                                ms=times[on.m][winner[pts[i].m]], own_ms=times[on.m][winner[on.m]]))
        return out

    def make(shape: str) -> Point:
        m = int(shape.split("=")[1])
        if m not in times:
            raise ProblemError(f"M={m} is deeper than the landscape ({DEPTH} levels)")
        return Point(m)

    budget = len(pow2)
    while target is not None and len(tried) < budget:
        wins = [configs[winner[p.m]] for p in points]
        cells = cells_for(points)
        assert not stale_points(points, wins, cells)
        new, _ = refinements(points, neighbour_losses(points, wins, cells), target=target,
                             budget=budget - len(tried), make=make, tried=tried)
        if not new:
            break
        tried |= {p.shape for _, p in new}
        points = insert_points(points, new)
        added += [p.m for _, p in new]
    return [p.m for p in points], sorted(added)


def serve(m: int, points: list[int], times: dict[int, list[float]], rule: str) -> tuple[int, float | None]:
    """The point whose winner serves M: the nearest on a log scale, or by the interval rule (the other side's
    winner where it is expected to lose less there: each winner's loss on the other point, scaled by M's position);
    and the regret the rule expects (None for nearest)."""
    lo = max(p for p in points if p <= m)
    hi = min(p for p in points if p >= m)
    if lo == hi:
        return lo, 0.0
    win = {p: min(range(len(times[p])), key=lambda i: times[p][i]) for p in (lo, hi)}
    loss_lo_on_hi = times[hi][win[lo]] / times[hi][win[hi]] - 1
    loss_hi_on_lo = times[lo][win[hi]] / times[lo][win[lo]] - 1
    t = math.log(m / lo) / math.log(hi / lo)
    if rule == "nearest":
        return (lo if t <= 0.5 else hi), None
    return (lo, t * loss_lo_on_hi) if t * loss_lo_on_hi <= (1 - t) * loss_hi_on_lo else (hi, (1 - t) * loss_hi_on_lo)


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log1p(v) for v in values)) - 1


def held_back(spec: dict[str, Any]) -> list[int]:
    """The kernel's held-back keys: log-uniform between its first and last point (seeded), none on the grid."""
    pow2, mids = grid_of(spec["low"], spec["high"])
    rng = random.Random(48)
    taken = {*pow2, *mids}
    held: list[int] = []
    while len(held) < HELD_BACK:
        m = round(math.exp(rng.uniform(math.log(spec["low"] + 1), math.log(spec["high"] - 1))))
        if m not in taken:
            held.append(m)
            taken.add(m)
    return held


def measure(name: str, spec: dict[str, Any], out: Path) -> tuple[dict[int, list[float]], float]:
    """Every config's time on every M of the kernel's grid and held-back keys (written to `out`), and how long
    the timing took."""
    pow2, mids = grid_of(spec["low"], spec["high"])
    configs, timer = spec["configs"], spec["timer"]()
    for c in configs:  # compile every config once, before any timing
        timer(spec["low"], c, rep=REP_MS)
    started = time.perf_counter()
    times = {m: [timer(m, c, rep=REP_MS) for c in configs] for m in sorted({*pow2, *mids, *held_back(spec)})}
    landscape_s = time.perf_counter() - started
    (out / f"refine_landscape_{name}.json").write_text(json.dumps({"configs": configs, "times": times,
                                                                   "landscape_s": landscape_s}))
    return times, landscape_s


def analyse(name: str, spec: dict[str, Any], times: dict[int, list[float]], landscape_s: float) -> dict[str, Any]:
    """The sweeps (pow2, refined) and each serving rule's regret on the held-back keys, from a landscape."""
    pow2, mids = grid_of(spec["low"], spec["high"])
    configs = spec["configs"]
    held = sorted(m for m in times if m not in {*pow2, *mids})  # as the landscape was timed
    best = {m: min(range(len(configs)), key=lambda i: times[m][i]) for m in times}
    result: dict[str, Any] = {"kernel": name, "configs": len(configs), "keys_timed": len(times),
                              "landscape_s": landscape_s, "held_back": sorted(held)}
    bucket = [times[m][best[min(p for p in pow2 if p >= m)]] / min(times[m]) - 1 for m in held]
    result["bucket"] = {"geomean": geomean(bucket), "worst": max(bucket),
                        "worst_at": held[max(range(len(held)), key=lambda i: bucket[i])]}
    grid = sorted({*pow2, *mids})  # every grid point tuned: what no serving of one point's winner gets below
    tuned = [times[m][best[serve(m, grid, times, "nearest")[0]]] / min(times[m]) - 1 for m in held]
    result["grid_nearest"] = {"points": len(grid), "geomean": geomean(tuned), "worst": max(tuned)}
    for label, target in (("pow2", None), ("refined", DEFAULT_TARGET)):
        points, added = simulate(times, configs, pow2, target)
        result[label] = {"points": points, "added": added}
        for rule in ("nearest", "interval"):
            regrets, expected = [], []
            for m in held:
                served, expect = serve(m, points, times, rule)
                regrets.append(times[m][best[served]] / min(times[m]) - 1)
                expected.append(expect)
            worst_at = held[max(range(len(held)), key=lambda i: regrets[i])]
            result[label][rule] = {"geomean": geomean(regrets), "worst": max(regrets), "worst_at": worst_at,
                                   "regrets": regrets, "expected": expected}
        wins = [configs[best[m]] for m in points]
        pts = [Point(m) for m in points]
        cells = [Cell(winner_key=pts[i].key, on_key=pts[j].key, config=wins[i],
                      ms=times[points[j]][configs.index(wins[i])], own_ms=times[points[j]][configs.index(wins[j])])
                 for j in range(len(pts)) for i in range(max(0, j - 1), min(len(pts), j + 2))]
        worst = worst_pair(neighbour_losses(pts, wins, cells))
        result[label]["worst_pair"] = [worst.low, worst.high, worst.loss] if worst is not None else None
        # the sweep's model of its points' trials (autotuner.engine.sweeps.predict), measured leaving each point out
        model = predict([Point(m) for m in points],
                        [{config_key(c): (c, times[m][i]) for i, c in enumerate(configs)} for m in points],
                        kernel_hash="-", triton_version="-")
        assert model is not None
        span = math.log(points[-1] / points[0])
        picked = [times[m][configs.index(model.pick_at(math.log(m / points[0]) / span))] / min(times[m]) - 1
                  for m in held]
        by_nearest: list[float] = result[label]["nearest"]["regrets"]
        chosen = picked if model.chosen == MODEL else by_nearest
        result[label]["predictor"] = {
            "chosen": model.chosen, "loo_model": model.model_loss, "loo_nearest": model.nearest_loss,
            "model": {"geomean": geomean(picked), "worst": max(picked)},
            "served": {"geomean": geomean(chosen), "worst": max(chosen)}}
        # each held-back key's best among the sweep's distinct winners, as timing only those at the key would find
        distinct = {best[p] for p in points}
        of_winners = [min(times[m][i] for i in distinct) / min(times[m]) - 1 for m in held]
        result[label]["best_of_winners"] = {"configs": len(distinct), "geomean": geomean(of_winners),
                                            "worst": max(of_winners)}
    return result


def main() -> None:
    global HELD_BACK, REP_MS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--held-back", type=int, default=HELD_BACK, help="keys held back per kernel")
    ap.add_argument("--rep", type=float, default=REP_MS, help="milliseconds of launches in each config's CUDA graph")
    ap.add_argument("--from", dest="source", help="a folder holding this benchmark's landscapes from a GPU run: "
                                                  "analyse those (no GPU needed)")
    args = ap.parse_args()
    HELD_BACK, REP_MS = args.held_back, args.rep
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.kernels.split(","):
        if args.source:
            saved = json.loads(Path(args.source, f"refine_landscape_{name}.json").read_text())
            times = {int(m): v for m, v in saved["times"].items()}
            landscape_s = float(saved.get("landscape_s", float("nan")))
        else:
            times, landscape_s = measure(name, KERNELS[name], out)
        results.append(analyse(name, KERNELS[name], times, landscape_s))
        print(f"{name}: {results[-1]['keys_timed']} keys timed in {results[-1]['landscape_s']:.0f} s", flush=True)
    (out / "refine_regret.json").write_text(json.dumps(results, indent=1))
    device = (open(Path(args.source, "device.txt")).readline().split(",")[0] if args.source
              and Path(args.source, "device.txt").exists() else torch.cuda.get_device_name())
    held = sorted({len(r["held_back"]) for r in results})
    print(f"\nregret on {'/'.join(map(str, held))} held-back keys per kernel (as timed), against each key's best "
          f"config (device: {device})\n")
    print("| kernel | sweep | points (added) | worst neighbouring pair | pow2 bucket (above) | nearest | "
          "interval rule | best of the sweep's winners at the key |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        for label in ("pow2", "refined"):
            s = r[label]
            pair = s["worst_pair"]
            pair_text = f"{pair[0]} / {pair[1]}: {pair[2]:+.1%}" if pair and pair[2] is not None else "-"
            cells = [f"{s[rule]['geomean']:+.2%} / {s[rule]['worst']:+.1%} (M={s[rule]['worst_at']})"
                     for rule in ("nearest", "interval")]
            b, w = r["bucket"], s["best_of_winners"]
            bucket = f"{b['geomean']:+.2%} / {b['worst']:+.1%} (M={b['worst_at']})" if label == "pow2" else "-"
            print(f"| {r['kernel']} | {label} | {len(s['points'])} ({len(s['added'])}: "
                  f"{', '.join(map(str, s['added'])) or '-'}) | {pair_text} | {bucket} | {cells[0]} | {cells[1]} | "
                  f"{w['geomean']:+.2%} / {w['worst']:+.1%} ({w['configs']} configs) |")
    print("\nthe sweep's model (autotuner.engine.sweeps.predict) against nearest: measured on the sweep's own points (leaving "
          "each out), the rule it chose, and both on the held-back keys\n")
    print("| kernel | sweep | left out: model / nearest | chosen | held back: model | held back: nearest | "
          "held back: served |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        for label in ("pow2", "refined"):
            pr, near = r[label]["predictor"], r[label]["nearest"]
            print(f"| {r['kernel']} | {label} | {pr['loo_model']:+.2%} / {pr['loo_nearest']:+.2%} | {pr['chosen']} | "
                  f"{pr['model']['geomean']:+.2%} / {pr['model']['worst']:+.1%} | "
                  f"{near['geomean']:+.2%} / {near['worst']:+.1%} | "
                  f"{pr['served']['geomean']:+.2%} / {pr['served']['worst']:+.1%} |")
    print("\nevery grid point tuned, the nearest served: " + ", ".join(
        f"{r['kernel']} ({r['grid_nearest']['points']} points) {r['grid_nearest']['geomean']:+.2%} / "
        f"{r['grid_nearest']['worst']:+.1%}" for r in results))
    print("\nthe interval rule's expected regret against the regret measured (refined sweeps):")
    for r in results:
        s = r["refined"]["interval"]
        gaps = [m - e for m, e in zip(s["regrets"], s["expected"], strict=True)]
        print(f"  {r['kernel']}: measured minus expected, median {statistics.median(gaps):+.2%}, "
              f"largest {max(gaps):+.2%}")


if __name__ == "__main__":
    main()
