"""The search engine, in three rooms and the tuner over them:

- `measure`: how a config's time is measured: the `Measurer` protocol, real launches (`live`: a trial process,
  `runner`, `trial_process`, `processes`' fork server, lanes on more GPUs, compile pools and a binary compiled
  once per host and shared between hosts) and a recorded table (`table`); CUDA-event timing with the L2 flushed.
- `search`: what to try: the `Search` contract, each strategy a module, the strategies by name, the search loop
  over a measurer, and replaying a recorded landscape.
- `sweeps`: problems that differ in one dimension: the sweep driver, cross-timing, refinement and prediction.
- `tuner` (one problem in phases), `tune_result` (what a run reports), `fits` (whether a problem fits a device).

May import: `autotuner.store` (through its interfaces), `autotuner.base`, the ground floor.
"""
