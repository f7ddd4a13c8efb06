"""`autotuner.autotune`: a drop-in for `@triton.autotune` whose results persist in the database, are shared through the
service and tuned offline by workers. `autotuned.Autotuned` is the decorated kernel; docs/design/launch.md walks through
the other modules.

May import: `autotuner.launch`, `autotuner.engine` (tuning in process), `autotuner.store`, `autotuner.base`, the ground
floor."""

from autotuner.decorator.autotuned import Autotuned, KernelNotTuned, autotune

__all__ = ["Autotuned", "KernelNotTuned", "autotune"]
