"""Launching a compiled Triton kernel without Triton's per-call work.

`kernel[grid](*args, **meta)` binds every argument, computes its specialization (dtypes, 16-byte alignment,
integers equal to 1 or divisible by 16), hashes that into a cache key, looks the compiled kernel up, and only
then launches, all of it Python on every call (benchmarks/RESULTS.md#behind-the-code). A caller that already knows every
argument but the tensors' data pointers is the same from call to call (the library calls cache one launcher per input signature:
dtypes, shapes, strides, devices, alignment and config) can skip all of it:

    launch = Launcher(softmax_kernel, grid, meta)
    launch(x, y, n_rows, n_cols, stride, stride)   # first call: through Triton, which compiles if needed
    launch(x2, y2, n_rows, n_cols, stride, stride)  # later calls: Triton's compiled launcher, directly

The first call goes through `kernel[grid]` and records the compiled kernel and Triton's bound arguments; later
calls substitute the new tensors (and host tensor descriptors) into them and call the compiled kernel's
launcher. The caller promises that every other argument is the same as in the first call and each tensor has
the first call's dtype, shape, strides and 16-byte alignment (Triton's specialization): that is what the
library's cache key holds. Under Triton's
interpreter, inside torch.compile's tracing, or where the installed Triton lacks what this relies on, every
call goes through `kernel[grid]`. Launch hooks (a profiler's) are called as Triton calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from triton.tools.tensor_descriptor import TensorDescriptor

from kernels._backend import interpreting
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DIRECT = True  # False: every call goes through `kernel[grid]` (benchmarks/launch_overhead.py compares both)

try:  # Triton >= 3.4 keeps the launch hooks in knobs.runtime
    from triton import knobs as _knobs

    _RUNTIME: Any = _knobs.runtime
except ImportError:  # pragma: no cover - older Triton
    _RUNTIME = None


class Launcher:
    """One kernel at one grid and one set of meta-parameters, launched directly after its first call."""

    __slots__ = ("fn", "grid", "meta", "_run", "_compiled", "_function", "_packed", "_values", "_slots", "_device")
    _slots: list[tuple[int, int]]  # (position in Triton's bound values, position in the call's arguments)

    def __init__(self, fn: Any, grid: tuple[int, ...], meta: Mapping[str, Any]) -> None:
        self.fn = fn
        self.grid = tuple(grid)
        self.meta = dict(meta)
        self._run: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.launch(self.grid, args)

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> Any:
        """Launch at `grid` (a decorated kernel's grid is computed per call); returns the compiled kernel."""
        if torch.compiler.is_compiling():  # traced: torch.compile handles the launch itself
            return self.fn[grid](*args, **self.meta)
        run = self._run
        if run is None or not DIRECT:
            return self._through_triton(grid, args)
        values = self._values.copy()
        for slot, position in self._slots:
            values[slot] = args[position]
        g0 = grid[0]
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = torch._C._cuda_getCurrentRawStream(self._device)
        enter, leave = (_RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook) if _RUNTIME is not None else (None, None)
        # Launch hooks (a profiler's; torch may install one) get what Triton's own launch gives them.
        metadata = self._compiled.launch_metadata(grid, stream, *values) if enter is not None else None
        run(g0, g1, g2, stream, self._function, self._packed, metadata, enter, leave, *values)
        return self._compiled

    def _through_triton(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> Any:
        compiled = self.fn[grid](*args, **self.meta)
        if self._run is not None or not DIRECT or interpreting():
            return compiled
        try:
            device = torch.cuda.current_device()
            binder = self.fn.device_caches[device][-1]
            bound = binder(*args, **self.meta)[0]
            remember = getattr(binder, "remember", None)  # autotuner.launch.specializations keeps Triton's specialization
            if remember is not None:
                remember(args, self.meta)
            values = list(bound.values())
            swapped = (torch.Tensor, TensorDescriptor)  # arguments a call brings anew; the rest is fixed per Launcher
            slots = [i for i, v in enumerate(values) if isinstance(v, swapped)]
            tensors = [i for i, a in enumerate(args) if isinstance(a, swapped)]
            if len(slots) != len(tensors) or any(values[s] is not args[t] for s, t in zip(slots, tensors, strict=True)):
                return  # the binder reordered or wrapped arguments: keep going through Triton
            self._values, self._device = values, device
            self._compiled, self._function, self._packed = compiled, compiled.function, compiled.packed_metadata
            self._slots = list(zip(slots, tensors, strict=True))
            self._run = compiled.run
        except (AttributeError, IndexError, KeyError, TypeError):  # a Triton without these internals
            self._run = None
        return compiled

    @property
    def direct(self) -> bool:
        """Whether calls now skip Triton's binding (after a first call on a GPU)."""
        return self._run is not None
