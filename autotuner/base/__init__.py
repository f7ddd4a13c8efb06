"""What every room stands on: the device a result is keyed by and the limits and datasheet ceilings read from
it (`device`, `roofline`), the ops by name (`registry`: the built-in declarations, plugins and decorated
kernels), and the settings read from AUTOTUNER_* variables (`settings`); where the commands' processes find their bytecode
(`bytecode`).

May import: `kernels`, `search_spaces` (the ground floor). Nothing else of autotuner.
"""
