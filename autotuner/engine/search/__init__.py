"""What to try: the `Search` contract, a module per strategy, the strategies by name, the search loop over a measurer,
and replaying a recorded landscape.

May import: `autotuner.engine.measure`, `autotuner.store` (through its interfaces), `autotuner.base`, the ground floor.
"""
