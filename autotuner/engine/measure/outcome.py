"""How measuring one config ended (`Outcome`, with its `Status`), and an exception read as a status; how soon one
could be measured (READY, COMPILING, NOT_STARTED)."""

from __future__ import annotations

import traceback
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from autotuner.engine.measure.timing import Timing

Status = Literal["ok", "invalid", "compile_error", "out_of_resources", "wrong_result", "crash", "timeout"]
# How soon a measurer could measure a config, before it has (`Measurer.readiness`, `Search.ask`'s `ready`): its
# compile done (or nothing to compile ahead), compiling, not started.
READY, COMPILING, NOT_STARTED = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    """How measuring one config ended: its status, and its timing when ok."""

    status: Status
    _: KW_ONLY
    timing: Timing | None = None
    compile_s: float | None = None
    error: str | None = None
    wait_s: float | None = None  # how long the search waited for its compile (a measurer with a compile pool)
    worker_s: float | None = None  # how long the trial process took to answer, from the request's arrival
    cut: bool = False  # ended by the command's time budget, not by the config: no answer about it, never stored


def classify(exc: BaseException) -> Status:
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfResources" or "out of resource" in text:
        return "out_of_resources"
    if name in ("CompilationError", "CompileTimeAssertionFailure") or "compilationerror" in text:
        return "compile_error"
    if "cuda error" in text or "illegal memory access" in text or "illegal address" in text or name == "AcceleratorError":
        return "crash"
    if isinstance(exc, (ValueError, TypeError)):
        return "invalid"
    return "crash"


def short_error(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return "\n".join(lines[-6:])[:2000]
