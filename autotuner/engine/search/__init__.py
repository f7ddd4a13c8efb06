"""What to try: the `Search` contract (`contract`), each strategy a module (`exhaustive`, `random_search`,
`tpe`), the strategies by name (`strategies`), the search loop over a measurer (`loop`) and replaying a
recorded landscape (`replay`).

May import: `autotuner.engine.measure`, `autotuner.store` (through its interfaces), `autotuner.base`, the ground
floor.
"""
