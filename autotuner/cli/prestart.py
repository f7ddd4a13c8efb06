"""`autotuner tune`'s trial worker and compile pool, started before the command imports torch and the ops, so their CUDA
contexts are made meanwhile. More: docs/design/service.md."""

from __future__ import annotations

from autotuner.engine.measure.compile_share import share
from autotuner.engine.measure.live import KeptProcesses, prestarted
from kernels._environment import env_text

_kept: KeptProcesses | None = None
_device: int | None = None


def _value(argv: list[str], option: str) -> str | None:
    """The value of `option` in the arguments (None: not given)."""
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def _gpus(argv: list[str]) -> str:
    """The `--gpus` value in the arguments, else AUTOTUNER_GPUS ("" for neither)."""
    given = _value(argv, "--gpus")
    return given if given is not None else env_text("AUTOTUNER_GPUS") or ""


def start(argv: list[str]) -> None:
    """Start the processes in the background (the fork server may still be importing); any doubt about the
    arguments or the settings: start nothing, and let the command report it."""
    global _kept, _device
    if any(a in ("--queue", "--help") for a in argv):
        return
    from pydantic import ValidationError

    from autotuner.base.settings import Settings
    from kernels._backend import cuda_device_count, interpreting

    try:
        settings = Settings()
    except ValidationError:
        return
    share(settings.compile_secret, _value(argv, "--db") or settings.db_url)
    if interpreting():
        _kept, _device = prestarted(settings), None
        return
    first = _gpus(argv).split(",")[0].strip()
    count = cuda_device_count()
    if first == "all":
        first = "0"
    if not count or (first and (not first.isdigit() or int(first) >= count)):
        return
    _device = int(first) if first else 0
    _kept = prestarted(settings, _device)


def take(device: int | None) -> KeptProcesses | None:
    """The processes started early, if they are on `device` (None: the current one, which is device 0 in a new
    process); else None, and any started are stopped."""
    global _kept
    kept, _kept = _kept, None
    if kept is None:
        return None
    if _device is not None and _device != (device or 0):
        kept.close()
        return None
    return kept
