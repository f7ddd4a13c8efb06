"""Launching a compiled Triton kernel without Triton's per-call work. More: docs/design/kernels.md."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from triton.tools.tensor_descriptor import TensorDescriptor

from kernels import _checks
from kernels._backend import interpreting
from kernels._shapes import contiguous_strides
from kernels._torch import lazy

if TYPE_CHECKING:
    import torch
else:
    torch = lazy(__name__)

DIRECT = True  # False: every call goes through `kernel[grid]` (benchmarks/launch_overhead.py compares both)
STATIC = True  # False: direct calls go through Triton's generated launcher rather than torch's static one

try:  # Triton >= 3.4 keeps the launch hooks in knobs.runtime
    from triton import knobs as _knobs

    _RUNTIME: Any = _knobs.runtime
except ImportError:  # pragma: no cover - older Triton
    _RUNTIME = None


_SWAPPED = (int, float)  # numbers a call may bring anew (bool is an int); tensors and descriptors are added below
_I32 = 2**31


def call_signature(value: Any) -> Any:
    """What Triton's specialization of one non-constexpr argument depends on: a tensor's dtype and 16-byte alignment, a
    host descriptor's dtype, block shape, rank and padding, an int's width and divisibility, else its type (and value).
    """
    t = type(value)
    if t is int:
        return int, value == 1, value % 16 == 0, -_I32 <= value < _I32
    if t is float or t is bool:
        return t
    if isinstance(value, torch.Tensor):  # (its device too: a launch hands torch's launcher its address, `addressed`)
        return value.dtype, value.data_ptr() % 16 == 0, value.device
    if isinstance(value, TensorDescriptor):  # Triton specializes a host descriptor on its dtype and block shape
        return (t, value.base.dtype, tuple(value.block_shape), len(value.shape), value.padding,
                getattr(value, "round_f32_to_tf32", False))
    return t, value


class Launcher:
    """One kernel at one grid and one set of meta-parameters, launched directly after its first call.

    `go(args)` launches at the launcher's own grid: through Triton until a first call has bound the arguments, then
    through `_direct_call`, a closure holding everything a launch needs but the call's own arguments."""

    __slots__ = ("fn", "grid", "meta", "go", "_run", "_compiled", "_function", "_packed", "_values", "_slots",
                 "_device", "_extras", "_static")
    _slots: list[tuple[int, int]]  # (position in the bound values, position in the call's arguments)
    _values: list[Any]  # the first call's bound values, None where a call's own arguments go
    _device: int  # the CUDA device the first call ran on (-1 in the interpreter)
    _compiled: Any  # Triton's compiled kernel (None in the interpreter)

    def __init__(self, fn: Any, grid: tuple[int, ...], meta: Mapping[str, Any]) -> None:
        self.fn = fn
        self.grid = tuple(grid)
        self.meta = dict(meta)
        self._run: Any = None
        self._static: Any = None  # (launch, function, num_warps, shared, arg types, values, slots, pointer slots):
        # torch's launcher
        self.go: Callable[[tuple[Any, ...]], Any] = self._at_grid

    def __call__(self, *args: Any) -> Any:
        return self.go(args)

    def _at_grid(self, args: tuple[Any, ...]) -> Any:
        return self.launch(self.grid, args)

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> Any:
        """Launch at `grid` (a decorated kernel's grid is computed per call); returns what Triton's launch returns
        (the compiled kernel; None in the interpreter)."""
        if torch.compiler.is_compiling():  # traced: torch.compile handles the launch itself
            return self.fn[grid](*args, **self.meta)
        run = self._run
        if run is None or not DIRECT:
            return self._through_triton(grid, args)
        g0 = grid[0]
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        hook = _RUNTIME.launch_enter_hook if _RUNTIME is not None else None
        hooked = hook is not None and bool(getattr(hook, "calls", True))  # Triton >= 3.5: an empty chain
        static = self._static
        if static is not None and STATIC and not hooked:
            launch, function, warps, shared, types, values, slots, pointers = static
            launch(function, g0, g1, g2, warps, shared, types, static_packed(values, slots, pointers, args),
                   torch._C._cuda_getCurrentRawStream(self._device))
            return self._compiled
        values = self._values.copy()
        for slot, position in self._slots:
            values[slot] = args[position]
        if run is _interpret:
            return self.fn[grid](*values, **self._extras)
        stream = torch._C._cuda_getCurrentRawStream(self._device)
        # Launch hooks (a profiler's; torch may install one) get what Triton's own launch gives them.
        metadata = self._compiled.launch_metadata(grid, stream, *values) if hooked else None
        run(g0, g1, g2, stream, self._function, self._packed, metadata, hook, _RUNTIME.launch_exit_hook
            if _RUNTIME is not None else None, *values)
        return self._compiled

    def _through_triton(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> Any:
        compiled = self.fn[grid](*args, **self.meta)
        if self._run is not None or not DIRECT:
            return compiled
        try:
            if interpreting():
                values, self._extras = self._bind(args)
                self._device, self._compiled = -1, None
                run: Any = _interpret
            else:
                device = torch.cuda.current_device()
                binder = self.fn.device_caches[device][-1]
                bound = binder(*args, **self.meta)[0]
                remember = getattr(binder, "remember", None)  # autotuner.launch.specializations keeps Triton's
                if remember is not None:
                    remember(args, self.meta)
                values = list(bound.values())
                self._device, self._compiled = device, compiled
                self._function, self._packed = compiled.function, compiled.packed_metadata
                run = compiled.run
            # the call's arguments are the first parameters, in order (Triton binds them so)
            taken = [i for i, a in enumerate(args) if isinstance(a, _swapped())]
            if len(values) < len(args) or any(values[i] is not args[i] for i in taken):
                return compiled  # the binder reordered or wrapped arguments: keep going through Triton
            for i in taken:
                values[i] = None  # a call's own arguments are never kept
            self._values, self._slots = values, [(i, i) for i in taken]
            self._static = None if run is _interpret else _static_launch(compiled, device, values, taken)
            self._run = run
            if self.grid and _RUNTIME is not None:
                self.go = _direct_call(self, len(args))
        except (AttributeError, IndexError, KeyError, TypeError):  # a Triton without these internals
            self._run = None
        return compiled

    def _bind(self, args: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
        """The interpreter's bound values (every parameter, in order) and the launch options besides them."""
        names = list(self.fn.arg_names)
        if len(args) > len(names):
            raise TypeError(f"{len(args)} arguments for {len(names)} parameters")
        missing = [n for n in names[len(args):] if n not in self.meta]
        if missing:  # a parameter left to its default: Triton binds it on every call
            raise KeyError(missing[0])
        values = [*args, *(self.meta[n] for n in names[len(args):])]
        return values, {k: v for k, v in self.meta.items() if k not in names}

    @property
    def direct(self) -> bool:
        """Whether calls now skip Triton's binding (after a first call; in the interpreter too)."""
        return self._run is not None


# Triton's argument types as torch's static launcher reads them (a pointer is a tensor or None: "O")
_STATIC_TYPES = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B", "u16": "H",
                 "u32": "I", "u64": "K", "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d"}
_SMALL_SHARED = 48 * 1024  # what a launcher that cannot opt a kernel into more shared memory may give it
_LOADED: dict[tuple[str, int], Any] = {}  # (kernel hash, device) -> (static_kernel, function), or None: refused


def static_kernel(compiled: Any) -> dict[str, Any] | None:
    """What torch's static launcher (Inductor's: the arguments packed in C++, no generated launcher) needs of a
    compiled kernel, read from its metadata: positions of the cubin's arguments among the bound values, their
    types, warps, shared memory and scratch arguments; None where it cannot launch it (clusters, scratch memory in
    use, a type it has no code for). Read through torch._C alone: importing torch._inductor takes seconds."""
    meta, src = compiled.metadata, compiled.src
    names = list(src.fn.arg_names)
    if getattr(meta, "num_ctas", 1) != 1 or any(getattr(meta, f"{kind}_scratch_size", 0) for kind in ("global",
                                                                                                        "profile")):
        return None

    def index(k: Any) -> int:  # a parameter as Triton's versions key it: its name, (position,) or its position
        return names.index(k) if isinstance(k, str) else (k[0] if isinstance(k, tuple) else k)

    signature = {index(k): v for k, v in src.signature.items()}
    constants = {index(k) for k in getattr(src, "constants", {})}
    keep = [i for i in sorted(signature) if signature[i] != "constexpr" and i not in constants]
    types = ["O" if signature[i].startswith("*") else _STATIC_TYPES.get(signature[i], "") for i in keep]
    if "" in types:
        return None
    scratch = sum(hasattr(meta, f"{kind}_scratch_size") for kind in ("global", "profile"))
    return {"keep": keep, "types": "".join(types) + "O" * scratch, "scratch": scratch, "warps": meta.num_warps,
            "shared": meta.shared, "name": meta.name}


def _static_launch(compiled: Any, device: int, values: list[Any], taken: list[int]) -> Any:
    """The static launch of `compiled` on `device` (static_values), or None: Triton's launcher then. Each kernel is
    read and loaded (or refused) once per device, however many launchers launch it."""
    try:
        launcher: Any = torch._C._StaticCudaLauncher
        key = (compiled.hash, device)
        if key not in _LOADED:
            _LOADED[key] = None  # refused, unless it loads here (a load that raises is refused once, too)
            kernel = static_kernel(compiled)
            function = None if kernel is None else _load(launcher, compiled, kernel, device)
            if function is not None:
                _LOADED[key] = (kernel, function)
        if _LOADED[key] is None:
            return None
        kernel, function = _LOADED[key]
        found = static_values(kernel, values, taken)
        return None if found is None else (launcher._launch_kernel, function, *found, addressed(found[2], found[4]))
    except Exception:  # no static launcher in this torch, or one that refuses this kernel
        return None


def _load(launcher: Any, compiled: Any, kernel: dict[str, Any], device: int) -> int | None:
    """The cubin loaded into torch's static launcher on `device`: its function, or None where this torch cannot."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/kernel.cubin"
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        try:
            loaded = launcher._load_kernel(path, kernel["name"], kernel["shared"], device)
        except TypeError:  # an older torch: the current device, and no opting into more shared memory
            if kernel["shared"] > _SMALL_SHARED or device != torch.cuda.current_device():
                return None
            loaded = launcher._load_kernel(path, kernel["name"], kernel["shared"])  # type: ignore[call-arg]
    return loaded[1] if len(loaded) == 4 else loaded[0]  # ((module,) function, registers, spills)


def static_values(kernel: dict[str, Any], values: list[Any], taken: list[int]) -> Any:
    """What a static launch of `kernel` (static_kernel) passes besides its function: (warps, shared memory,
    argument types, the values its cubin takes of the bound `values` with a call's own left None, and (slot, call
    position) pairs); None where the bound values do not cover its arguments."""
    keep = kernel["keep"]
    if keep and keep[-1] >= len(values):
        return None
    kept = [None if i in taken else values[i] for i in keep] + [None] * kernel["scratch"]
    return (kernel["warps"], kernel["shared"], kernel["types"], kept, [(keep.index(i), i) for i in taken if i in keep])


def _direct_call(launcher: Launcher, n_args: int) -> Callable[[tuple[Any, ...]], Any]:
    """A bound launcher's `go`: the launch at its grid, each call's arguments placed into the kept values, through
    torch's static launcher (the interpreter's run in its place under the interpreter), else Triton's generated
    launcher (`Launcher.launch`); and there too where Triton's own launch is wanted: inside tracing, with a launch
    hook installed, or DIRECT or STATIC off. Everything but the call's arguments is read here once: this runs on
    every launch of a library call."""
    grid, slow, runtime, compiling = launcher.grid, launcher.launch, _RUNTIME, torch.compiler.is_compiling
    if launcher._static is not None:
        launch, function, warps, shared, types, values, slots, pointers = launcher._static
        stream, device, result = torch._C._cuda_getCurrentRawStream, launcher._device, launcher._compiled
    elif launcher._run is _interpret:
        fn, extras = launcher.fn, launcher._extras

        def launch(function: Any, g0: int, g1: int, g2: int, warps: Any, shared: Any, types: Any, packed: Any,
                   stream: Any) -> None:
            fn[grid](*packed, **extras)

        function = warps = shared = types = None
        values, slots, device, result = launcher._values, launcher._slots, -1, None
        pointers = ()  # (the interpreter's stand-in takes the tensors themselves)

        def stream(device: int) -> int:
            return 0
    else:
        return launcher._at_grid
    g0, g1, g2 = (*grid, 1, 1)[:3]
    n = len(slots)
    if n == n_args and sorted(slots) == [(i, i) for i in range(n)]:  # the call's arguments lead, in order
        tail = tuple(values[n:])

        def go(args: tuple[Any, ...]) -> Any:
            hook = runtime.launch_enter_hook
            if compiling() or not (DIRECT and STATIC) or (hook is not None and getattr(hook, "calls", True)):
                return slow(grid, args)
            if pointers:
                packed = [*args, *tail]
                for i in pointers:
                    v = packed[i]
                    packed[i] = 0 if v is None else v.data_ptr()
                args = tuple(packed)
            else:
                args = args + tail
            launch(function, g0, g1, g2, warps, shared, types, args, stream(device))
            return result
        return go

    def go_placed(args: tuple[Any, ...]) -> Any:
        hook = runtime.launch_enter_hook
        if compiling() or not (DIRECT and STATIC) or (hook is not None and getattr(hook, "calls", True)):
            return slow(grid, args)
        launch(function, g0, g1, g2, warps, shared, types, static_packed(values, slots, pointers, args),
               stream(device))
        return result
    return go_placed


def addressed(types: str, slots: list[tuple[int, int]]) -> tuple[int, ...]:
    """The slots of a static launch's values where a call's tensor goes, which every direct launch gives torch's
    launcher as its address (`data_ptr()`, 0 for None): given the tensor, the launcher calls data_ptr() itself and
    asks the driver what the address is (cuPointerGetAttribute), on every launch, for every pointer. What that query
    would catch, a tensor off the GPU, never reaches a bound launcher: a kernel module's launch was prepared for its
    tensors' devices and a library call's key holds them, and a decorated kernel's hit is keyed by each tensor's
    device (`call_signature`)."""
    return tuple(slot for slot, _ in slots if types[slot] == "O")


def static_packed(values: list[Any], slots: list[tuple[int, int]], pointers: tuple[int, ...],
                  args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A static launch's values for one call: the kept values with the call's arguments in their slots, tensors in
    `pointers`' slots as their addresses (`addressed`)."""
    packed = values.copy()
    for slot, position in slots:
        packed[slot] = args[position]
    for i in pointers:
        v = packed[i]
        packed[i] = 0 if v is None else v.data_ptr()
    return tuple(packed)


# (shape, dtype, device) -> how a new output is made: (allocator, shape, strides, CUDA device index or None)
_OUTPUTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
MAX_OUTPUTS = 1024  # past that the table starts over


def _allocator(device: torch.device) -> Any:
    """torch's allocation of a strided tensor that skips its dispatcher and argument parsing (what Inductor's
    generated code calls, `empty_strided_cuda`), for `device`'s type; None where this torch has none."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    return getattr(guards, f"_empty_strided_{device.type}", None)


def new_output(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`kernels._checks.new_output` (a new contiguous output, NaN while poisoning is on) for a kept launch's every
    call, through torch's allocator for the device's type with the shape and strides worked out once per shape,
    dtype and device: `torch.empty` parses a shape, a dtype and a device and goes through the dispatcher on every
    call. CUDA's allocates on the current device, so an output for another is made the slow way. The kernel
    modules import it under `_checks`' name: their text is their results' kernel hash, and how an output is
    allocated changes no binary."""
    if _checks._POISON or 0 in shape:  # (an empty shape's strides as torch.empty gives them)
        return _checks.new_output(shape, dtype, device)
    key = (shape, dtype, device)
    made = _OUTPUTS.get(key)
    if made is None:
        if len(_OUTPUTS) >= MAX_OUTPUTS:
            _OUTPUTS.clear()
        made = _OUTPUTS[key] = _output_maker(tuple(shape), device)
    allocate, size, strides, index = made
    if index is not None and torch._C._cuda_getDevice() != index:
        return _checks.new_output(shape, dtype, device)
    return allocate(size, strides, dtype)


def _output_maker(shape: tuple[int, ...], device: torch.device) -> tuple[Any, ...]:
    """How `new_output` makes a contiguous tensor of this shape on this device, given its dtype (the shape as a
    plain tuple of ints and contiguous strides: what torch's strided allocators take)."""
    size, strides_t = tuple(int(n) for n in shape), contiguous_strides(shape)
    device = torch.device(device)  # (a caller may name it)
    allocate = _allocator(device)
    if allocate is None:  # (the meta device, a torch without these allocators)
        return functools.partial(_empty_strided, device=device), size, strides_t, None
    index = None
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
    return allocate, size, strides_t, index


def _empty_strided(size: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device) -> torch.Tensor:
    return torch.empty_strided(size, strides, dtype=dtype, device=device)


def _interpret() -> None:
    """The run of a launcher under Triton's interpreter (a marker: the interpreter runs the bound values)."""


def _swapped() -> tuple[type, ...]:
    return (torch.Tensor, TensorDescriptor, *_SWAPPED)
