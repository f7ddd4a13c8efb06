"""Device identity: what a stored result is keyed by (name and compute capability; `cpu-interpreter` without CUDA), and
the limits constraints read (SMs, memory, opt-in shared memory per block)."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

import kernels  # noqa: F401  (selects the interpreter before anything imports triton's jit)
from kernels._backend import cuda_device_count, cuda_properties, interpreting
from search_spaces.errors import AutotunerError

INTERPRETER = "cpu-interpreter"
# The interpreter has no shared memory; it is given a Hopper GPU's opt-in limit so that its space is the
# space a tuning run on such a GPU would see.
INTERPRETER_SMEM = 232448


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    capability: tuple[int, int]
    sm_count: int
    total_memory: int
    smem_per_block: int
    torch_device: str

    @property
    def key(self) -> str:
        if self.name == INTERPRETER:
            return INTERPRETER
        return f"{self.name} (sm_{self.capability[0]}{self.capability[1]})"

    @property
    def is_interpreter(self) -> bool:
        return self.name == INTERPRETER

    @property
    def index(self) -> int | None:
        """The CUDA device index (None: the interpreter)."""
        return None if self.is_interpreter else int(self.torch_device.split(":")[1])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["key"] = self.key
        return d


class NoDevice(AutotunerError, RuntimeError):
    """No CUDA device is visible and Triton's interpreter is off: nothing can run kernels here."""


def parse_gpus(text: str | None) -> tuple[int, ...]:
    """`--gpus` / AUTOTUNER_GPUS: device indices separated by commas ("0,1"), or "all" (every visible GPU; on
    the interpreter, two processes). Empty: ()."""
    text = (text or "").strip()
    if not text:
        return ()
    if text == "all":
        if interpreting():
            return (0, 1)
        return tuple(range(cuda_device_count()))
    try:
        gpus = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--gpus takes device indices separated by commas (e.g. 0,1) or 'all', got {text!r}") from None
    if any(g < 0 for g in gpus):
        raise ValueError(f"--gpus takes device indices (0 or more), got {text!r}")
    return gpus


def current_device(index: int | None = None) -> DeviceInfo:
    """The device kernels launch on: CUDA device `index` (default: torch's current one, else 0) or the interpreter, its
    properties read from the driver so a process that only plans needs no torch."""
    if index is None and not interpreting():
        torch = sys.modules.get("torch")
        index = int(torch.cuda.current_device()) if torch is not None and torch.cuda.is_available() else 0
    return _device(index)


@functools.cache
def _device(index: int | None) -> DeviceInfo:
    from kernels import _backend

    if _backend.INTERPRETER_TOO_LATE:
        raise NoDevice("no CUDA device is visible, and Triton was imported before TRITON_INTERPRET was set; run with "
                       "TRITON_INTERPRET=1 in the environment to run kernels on the CPU (a small shape: the "
                       "interpreter is slow)")
    if interpreting():
        return DeviceInfo(INTERPRETER, (0, 0), os.cpu_count() or 1, 0, INTERPRETER_SMEM, "cpu")
    if not cuda_device_count():
        raise NoDevice("TRITON_INTERPRET is off but no CUDA device is visible; set TRITON_INTERPRET=1 to run on the CPU")
    assert index is not None
    props = cuda_properties(index)
    return DeviceInfo(props.name, props.capability, props.sm_count, props.total_memory, props.smem_per_block,
                      f"cuda:{index}")
