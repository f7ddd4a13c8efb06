"""Search efficiency on recorded landscapes: for each landscape and strategy, the share of seeds whose
search comes within 2% of the landscape's best with a budget of 15% of its space.

    python benchmarks/replay_efficiency.py [LANDSCAPE.json ...] [--seeds 20] [--strategies tpe,random] [--width 14]

With no files, every landscape in tests/data/landscapes is used; `--held-out`, those of
tests/data/landscapes_held_out instead: recorded on a GPU and never looked at while the search was developed, so
that what it reaches there is what it reaches on landscapes it was not fitted to. The search asks ahead as the
tuner does with a compile pool `--width` wide (14 on a one-GPU 16-core host; 1: one config at a time).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.engine.search.replay import TUNER_WIDTH, load_landscape, replay  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.15, help="budget as a share of the space")
    parser.add_argument("--strategies", default="tpe,random")
    parser.add_argument("--width", type=int, default=TUNER_WIDTH, help="configs the tuner may ask ahead")
    parser.add_argument("--held-out", action="store_true", help="the held-out landscapes")
    args = parser.parse_args()
    folder = "landscapes_held_out" if args.held_out else "landscapes"
    files = args.files or sorted((Path(__file__).resolve().parents[1] / "tests" / "data" / folder).glob("*.json"))
    if not files:
        sys.exit(f"no landscapes given and none found in tests/data/{folder}")
    print(f"asking ahead as a tuner with a compile pool {args.width} wide")
    print("| landscape | configs | budget | strategy | within 2% | mean gap to best | seconds |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        land = load_landscape(f)
        budget = math.floor(args.fraction * len(land.configs))
        for strategy in args.strategies.split(","):
            t0 = time.perf_counter()
            runs = [replay(land, budget, seed, strategy, args.width) for seed in range(args.seeds)]
            hits = sum(r["within_2pct"] for r in runs)
            gap = sum(r["best_ms"] / r["optimum_ms"] - 1 for r in runs) / len(runs)
            print(f"| {land.name} | {len(land.configs)} | {budget} | {strategy} | {hits}/{len(runs)} "
                  f"({hits / len(runs):.0%}) | {gap:.2%} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
