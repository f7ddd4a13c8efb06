"""torch, imported where it is first used rather than where a module is imported. More: docs/design/kernels.md."""

from __future__ import annotations

import sys
from typing import Any

_SHAPES: Any = None  # kernels._shapes.TORCH while `use_shapes` is on


class _LazyTorch:
    __slots__ = ("_owner",)

    def __init__(self, owner: str) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        if _SHAPES is not None:
            return getattr(_SHAPES, name)
        import torch

        owner = sys.modules.get(self._owner)
        if owner is not None and getattr(owner, "torch", None) is self:
            owner.torch = torch  # type: ignore[attr-defined]
        return getattr(torch, name)

    def __repr__(self) -> str:
        return f"<torch, imported on first use by {self._owner}>"


def lazy(owner: str) -> Any:
    """torch for the module named `owner`: torch itself if it is imported already, else a stand-in that imports it
    on first use."""
    return sys.modules["torch"] if "torch" in sys.modules else _LazyTorch(owner)


def use_shapes(on: bool) -> None:
    """In a process that has not imported torch (a compile process): from now on (`on`) the kernel modules' torch
    answers with shape-only tensors (kernels._shapes), or (not `on`) imports torch at its next use again."""
    global _SHAPES
    if on and "torch" in sys.modules:
        raise RuntimeError("torch is imported here: the kernel modules already hold it")
    from kernels._shapes import TORCH

    _SHAPES = TORCH if on else None


def imported() -> bool:
    """Whether this process has imported torch."""
    return "torch" in sys.modules
