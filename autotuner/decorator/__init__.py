"""`autotuner.autotune`: a drop-in for `@triton.autotune` whose results persist in the database, are shared
through the service, and can be tuned offline by workers. `autotuned.Autotuned` is the decorated kernel;
`kernel_problem` the problem a key names and the recorded call a worker replays; `lanes` the further GPUs a
first tuning may use (AUTOTUNER_GPUS); `spec` the kernel, its configs or space, hooks and pruning; `keys` keys,
problems and the launch that met a key; `engine_view` the kernel as a TunableOp for the engine; `configs` what
is read of Triton's objects; `triton_views` what Triton's autotuner shows its users (`cache`,
`configs_timings`, TRITON_PRINT_AUTOTUNING, the autotuning listener).

May import: `autotuner.launch` (lookup, kept binaries), `autotuner.engine` (tuning in process), `autotuner.store`,
`autotuner.base`, the ground floor.
"""

from autotuner.decorator.autotuned import Autotuned, KernelNotTuned, autotune

__all__ = ["Autotuned", "KernelNotTuned", "autotune"]
