"""How a config's time is measured: the `Measurer` protocol, real launches in an isolated trial process (`live`,
`runner`, `trial_process`, `processes`, `lanes`), compiles ahead and shared (`compile_*`), timing (`timing`,
`l2_flush`), outcomes, and a recorded table (`table`).

May import: `autotuner.store` (through its interfaces), `autotuner.base`, the ground floor."""
