"""The search engine: tuning one problem in phases (`tuner`), the strategies (`search`), the measurement boundary
(`measure`: live trials or a recorded landscape), trials in isolated processes (`runner`, `compile_pool`,
`processes`' fork server; `compile_lock`: a binary compiled once on a host), CUDA-event timing with an L2 flush (`timing`, `l2_flush`), whether a problem fits
the device (`fits`), what a run reports (`tune_result`) and replaying a landscape (`replay`).

May import: `autotuner.store` (through its interfaces), `autotuner.base`, `db` errors, the ground floor.
"""
