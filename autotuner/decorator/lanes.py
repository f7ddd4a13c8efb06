"""A decorated kernel's first tuning on more GPUs of its host (AUTOTUNER_GPUS): the arguments are copied to each further
GPU of the same type, where a thread measures configs; the launch's own device times the baseline and the re-time, so
the winner is chosen on one GPU. More: docs/design/launch.md."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from autotuner.base.device import DeviceInfo, current_device, parse_gpus
from autotuner.decorator.kernel_problem import SCALARS
from autotuner.decorator.spec import Hooks, KernelSpec
from kernels._backend import interpreting

log = logging.getLogger(__name__)

# Seconds of GPU sleep added ahead of each timing while several lanes measure: another lane's thread may hold the
# GIL for an interpreter switch interval (5 ms) or a search step, and the timed launches must stay queued
# meanwhile (engine.timing's `queue_slack_s`).
QUEUE_SLACK_S = 0.02


@dataclasses.dataclass
class Lane:
    """A further device measuring configs: its index (None: the interpreter's CPU), the launch's arguments copied
    there, hooks of its own (the default hooks keep the values they restore), and the reference output there."""

    device: int | None
    named: dict[str, Any]
    hooks: Hooks
    ref: Any = None


def why_one_lane(spec: KernelSpec) -> str | None:
    """Why this kernel is measured on its launch's device alone whatever AUTOTUNER_GPUS says; None: it can use
    more."""
    if spec.hooks.user_pre_hook is not None or spec.hooks.user_post_hook is not None:
        return "it has hooks of its own"
    if spec.do_bench is not None:
        return "it times with a do_bench of its own"
    return None


def further_devices(gpus: str | None, device: DeviceInfo) -> list[int | None]:
    """The devices of `gpus` (AUTOTUNER_GPUS) other than `device`, of its type (others left out with a warning); on the
    interpreter, one CPU lane (None) per further index."""
    try:
        indices = parse_gpus(gpus)
    except ValueError as exc:
        log.warning("autotuner: AUTOTUNER_GPUS ignored: %s", str(exc))
        return []
    if interpreting():
        return [None] * max(0, len(dict.fromkeys(indices)) - 1)
    out: list[int | None] = []
    for index in dict.fromkeys(indices):
        if index == device.index:
            continue
        try:
            other = current_device(index)
        except Exception as exc:  # noqa: BLE001 - a device that is not there: said, and left out
            log.warning("autotuner: AUTOTUNER_GPUS names cuda:%d, which cannot be used here (%s)", index, str(exc))
            continue
        if other.key != device.key:
            log.warning("autotuner: AUTOTUNER_GPUS names cuda:%d (%s); the launch runs on %s, and a config's time "
                        "must come from one device type: left out", index, other.key, device.key)
            continue
        out.append(index)
    return out


def lane_devices(spec: KernelSpec, device: DeviceInfo, gpus: str | None) -> list[int | None]:
    """The further devices AUTOTUNER_GPUS (`gpus`) lets a first tuning of this kernel measure on, launched on
    `device`; none where the kernel must stay on its launch's device (`why_one_lane`, said once per kernel)."""
    devices = further_devices(gpus, device) if gpus else []
    why = why_one_lane(spec) if devices else None
    if why is None:
        return devices
    if spec.name not in _SAID_ONE_LANE:
        _SAID_ONE_LANE.add(spec.name)
        log.warning("autotuner: %s is tuned on its launch's GPU only (AUTOTUNER_GPUS=%s): %s", spec.name, gpus, why)
    return []


_SAID_ONE_LANE: set[str] = set()


def copied(named: Mapping[str, Any], device: int | None) -> dict[str, Any]:
    """The arguments with every tensor copied to `device` (None: the CPU), keeping shapes, strides, offsets and
    aliasing, a dataclass's tensors too; TypeError for one that cannot be copied."""
    target = torch.device("cpu") if device is None else torch.device("cuda", device)
    storages: dict[tuple[str, int], Any] = {}

    def tensor(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr())
        if key not in storages:  # the whole storage, once: views of it stay views of one copy
            whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            storages[key] = whole.to(target, copy=True).untyped_storage()
        return torch.empty(0, dtype=t.dtype, device=target).set_(storages[key], t.storage_offset(), t.size(),
                                                                   t.stride())

    def value(name: str, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return tensor(v)
        if isinstance(v, (*SCALARS, torch.dtype)):
            return v
        if dataclasses.is_dataclass(v) and not isinstance(v, type):  # a host TensorDescriptor, say
            fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
            return dataclasses.replace(v, **{k: value(f"{name}.{k}", x) for k, x in fields.items()})
        if isinstance(v, (tuple, list)):
            return type(v)(value(f"{name}[{i}]", x) for i, x in enumerate(v))
        if type(v).__module__.split(".")[0] == "triton":  # a constexpr, a tl.dtype: values, not memory
            return v
        raise TypeError(f"argument {name} is a {type(v).__name__}, which cannot be copied to another device")

    return {name: value(name, v) for name, v in named.items()}


def set_up(named: Mapping[str, Any], ref: Any, hooks: Hooks, devices: Sequence[int | None]) -> list[Lane]:
    """A lane per device: the arguments and the reference output copied there. A device that cannot hold them
    (out of memory) or arguments that cannot be copied end the list there, with a warning."""
    lanes: list[Lane] = []
    for device in devices:
        try:
            with on(device):
                lane = Lane(device, copied(named, device), dataclasses.replace(hooks, restore_copies={}))
                lane.ref = copied(ref, device) if isinstance(ref, Mapping) else ref
        except (TypeError, RuntimeError) as exc:  # torch's out of memory is a RuntimeError
            log.warning("autotuner: tuning on %d GPU(s) instead of %d: %s", 1 + len(lanes), 1 + len(devices), str(exc))
            break
        lanes.append(lane)
    return lanes


@contextmanager
def on(device: int | None) -> Iterator[None]:
    """This thread's current CUDA device while inside (Triton launches, events and the L2 flush follow it)."""
    with torch.cuda.device(device) if device is not None else nullcontext():
        yield
