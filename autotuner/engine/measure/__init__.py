"""How a config's time is measured: the `Measurer` protocol (`protocol`), real launches in an isolated trial
process (`live`, `runner`, `trial_process`, `processes`, `lanes`), compiles ahead and shared (`compile_pool`,
`compile_lock`, `compile_share`, `compile_share_backend`), timing (`timing`, `l2_flush`), how a measurement
ended (`outcome`) and measurers without a process (`table`).

May import: `autotuner.store` (through its interfaces), `autotuner.base`, the ground floor.
"""
