"""What every room stands on: the device a result is keyed by and the limits and datasheet ceilings read from
it (`device`, `roofline`), the ops by name (`registry`: the built-in declarations, plugins and decorated
kernels), the settings read from AUTOTUNER_* variables (`settings`), and where the commands' processes read their
bytecode from where torch's install keeps none (`bytecode`, and the fill of a first command's tree:
`bytecode_fill`, run as a script).

May import: `kernels`, `search_spaces` (the ground floor). Nothing else of autotuner.
"""
