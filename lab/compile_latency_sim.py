"""How long the tuner's search waits on compiles, simulated on a recorded landscape with a virtual clock: the real
run_search and TPE search, a pool of WORKERS compiling each config for a time drawn from a tune's compile times, the
trial worker timing each config for TIME_S. Prints the waits and the result's regret per seed.

    python lab/compile_latency_sim.py [landscape.json] [--seeds 20]
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.engine.measure.outcome import COMPILING, NOT_STARTED, READY, Outcome  # noqa: E402
from autotuner.engine.measure.table import TableMeasurer  # noqa: E402
from autotuner.engine.measure.timing import Timing  # noqa: E402
from autotuner.engine.search.loop import ask_first, run_search  # noqa: E402
from autotuner.engine.search.replay import default_for, load_landscape  # noqa: E402
from autotuner.engine.search.strategies import make_search  # noqa: E402
from search_spaces.space import config_key  # noqa: E402

# a cold matmul 4096 tune's compile seconds (H200 host, 320 compiles): quartiles
COMPILE_Q = [0.11, 0.34, 0.44, 0.60, 0.98]
WORKERS, TIME_S, START_S = 14, 0.015, 0.8  # the trial worker ready START_S after the first configs went to the pool


def compile_s(key: str) -> float:
    u = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 2**32 * 4
    i = min(int(u), 3)
    return COMPILE_Q[i] + (COMPILE_Q[i + 1] - COMPILE_Q[i]) * (u - i)


class Sim(TableMeasurer):
    def __init__(self, times):
        super().__init__(times)
        self.clock = 0.0
        self.free = [0.0] * WORKERS
        self.done: dict[str, float] = {}
        self.wait = 0.0
        self.compiles = 0

    def _schedule(self, key: str) -> None:
        start = max(self.clock, heapq.heappop(self.free))
        end = start + compile_s(key)
        heapq.heappush(self.free, end)
        self.done[key] = end
        self.compiles += 1

    def compile_ahead(self, configs):
        for c in configs:
            if config_key(c) not in self.done:
                self._schedule(config_key(c))

    def speculate(self, configs):
        busy = sum(t > self.clock for t in self.free)
        for c in configs:
            if busy >= WORKERS:
                break
            if config_key(c) not in self.done:
                self._schedule(config_key(c))
                busy += 1

    def readiness(self, config):
        t = self.done.get(config_key(config))
        return NOT_STARTED if t is None else READY if t <= self.clock else COMPILING

    def first_ready(self, configs, wait_for_one=True):
        ts = [self.done.get(config_key(c)) for c in configs]
        if None in ts:
            return ts.index(None)
        first = min(ts)
        if first > self.clock:
            self.wait += first - self.clock
            self.clock = first
        return next(i for i, t in enumerate(ts) if t <= self.clock)

    def measure(self, config, lane=0, give_up_ms=None):
        key = config_key(config)
        if key not in self.done:  # the trial worker compiles it
            self.clock += compile_s(key)
            self.done[key] = self.clock
        self.clock += TIME_S
        ms = self.times[key]
        if ms is None:
            return Outcome("crash", error="failed")
        return Outcome("ok", timing=Timing(ms, ms, ms, 1, "sim"))


def one(landscape, seed: int, budget: int):
    sim = Sim(landscape.times)
    search = make_search("tpe", landscape.configs, landscape.params, budget, seed, first=[default_for(landscape)])
    ahead = ask_first(search, sim, WORKERS)
    sim.clock = START_S
    run_search(search, sim, budget=budget, batch=WORKERS, ahead=ahead)
    best = search.best(1)[0][1]
    return sim.wait, sim.clock - START_S, sim.compiles, best / landscape.optimum_ms - 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("landscape", nargs="?",
                    default="tests/data/landscapes/matmul_4096x4096x4096_float16_h200_full.json")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=64)
    args = ap.parse_args()
    landscape = load_landscape(args.landscape)
    rows = [one(landscape, s, args.budget) for s in range(args.seeds)]
    print(json.dumps({"landscape": landscape.name, "wait_s": round(statistics.mean(r[0] for r in rows), 3),
                      "search_s": round(statistics.mean(r[1] for r in rows), 3),
                      "compiles": round(statistics.mean(r[2] for r in rows), 1),
                      "regret": round(statistics.mean(r[3] for r in rows), 4),
                      "within_2pct": sum(r[3] <= 0.02 for r in rows)}))


if __name__ == "__main__":
    main()
