"""Looking at results: `autotuner bench`'s interleaved timings against torch (`bench`), the device's measured
ceilings (`peaks`), and the speedup report and its data (`report`).

May import: `autotuner.engine` (its timing), `autotuner.store`, `autotuner.base`, the ground floor.
"""
