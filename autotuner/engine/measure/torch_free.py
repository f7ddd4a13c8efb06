"""Compiling before torch is imported: a compile-pool process that never imports torch is ready in a fraction of a second,
where torch's import takes seconds, so a tune's first compiles start with the command. In such a process Triton's
driver answers the device, stream and target itself (Triton 3.6's asks torch for them), and the kernel modules launch
on shape-only tensors (kernels._shapes) with `warmup=True`: the binaries, and their keys in Triton's cache, are those
a launch on real tensors finds (tests/integration/test_torch_free_compile.py). More: docs/design/engine.md."""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from typing import Any

from kernels import _backend, _torch

_STATE: dict[str, Any] = {}


class _NoTorch(MetaPathFinder):
    """torch kept out of this process: Triton 3.6's argument binder imports it where it can (seconds) to tell tensors
    apart, and takes its own way where it cannot; the kernel modules have their shape-only tensors."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"{name} is not imported in a process that compiles without torch", name=name)
        return None


_BLOCK = _NoTorch()


def possible() -> bool:
    """Whether this process can compile without torch: it has not imported it."""
    return "torch" not in sys.modules


def active() -> bool:
    """Whether this process compiles without torch now (`start`)."""
    return bool(_STATE)


def device() -> int:
    """The CUDA device this process compiles for (`start`)."""
    return int(_STATE["index"])


def start(index: int) -> None:
    """From now on this process compiles for CUDA device `index` without torch: Triton's driver is one that needs
    none, the kernel modules get shape-only tensors, and a meta tensor stands for that device (`_backend`)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    props = _backend.properties(index)
    capability = props.capability
    driver.set_active(_driver_class()(index, GPUTarget("cuda", capability[0] * 10 + capability[1], 32), capability))
    _torch.use_shapes(True)
    sys.meta_path.insert(0, _BLOCK)
    _backend.COMPILE_ONLY, _backend.META_DEVICE = True, index
    _STATE["index"] = index


def leave() -> None:
    """Back to torch, imported at the kernel modules' next use: for an op whose modules, inputs or launch need torch
    itself. The driver stays (it answers for the device whether torch is imported or not, and loads binaries into the
    context torch makes where the process needs real memory)."""
    if not _STATE:
        return
    _torch.use_shapes(False)
    if _BLOCK in sys.meta_path:
        sys.meta_path.remove(_BLOCK)
    _STATE.clear()


def _driver_class() -> type:
    from triton.backends.nvidia import driver as nvidia

    class TorchFreeDriver(nvidia.CudaDriver):  # type: ignore[misc, name-defined]
        """Triton's CUDA driver for a process that compiles and never launches: one device, the default stream."""

        def __init__(self, index: int, target: Any, capability: tuple[int, int]) -> None:  # (not Triton's: no torch)
            self.index, self.target, self.capability = index, target, capability
            self.launcher_cls = nvidia.CudaLauncher
            self._utils: Any = None

        @property
        def utils(self) -> Any:  # type: ignore[override]
            """Triton's C module over the CUDA driver (Triton 3.9's launchers are built on it), made at first use."""
            if self._utils is None:
                self._utils = nvidia.CudaUtils()
            return self._utils

        def get_current_device(self) -> int:
            return self.index

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_current_target(self) -> Any:
            return self.target

        def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
            return self.capability

        def get_active_torch_device(self) -> Any:
            raise RuntimeError("a compile process without torch has no torch device")

    return TorchFreeDriver
