"""Problems of one op that differ in one dimension: the sweep driver (`sweep`), each point's winner timed on
its neighbours (`cross_time`), points added where neighbours disagree (`refine`) and a model for the problems
between points (`predict`).

May import: `autotuner.engine` (the tuner), `autotuner.engine.search`, `autotuner.engine.measure`,
`autotuner.store` (through its interfaces), `autotuner.base`, the ground floor.
"""
