"""Looking at results: `autotuner bench`'s interleaved timings against torch (`bench`), the device's measured
ceilings (`peaks`), the speedup report and its data (`report`), and kernel variants checked and timed side by
side for the benchmarks (`kinds`).

May import: `autotuner.engine` (its timing), `autotuner.store`, `autotuner.base`, the ground floor.
"""
