"""Problems of one op that differ in one dimension: the driver (`sweep`), winners timed on neighbours (`cross_time`),
points added where neighbours disagree (`refine`), and a model between points (`predict`).

May import: `autotuner.engine`, its `search` and `measure`, `autotuner.store` (interfaces), `autotuner.base`, the ground
floor."""
