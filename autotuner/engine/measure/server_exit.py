"""Imported by the fork server alone (autotuner.engine.measure.processes.PRELOAD): when the command that started it exits,
the server ends at once, skipping the interpreter's tear-down of torch and Triton (0.3-0.5 s), during which it held
the command's standard output and error open: a caller reading the command's output (`$(autotuner tune --json)`,
a subprocess with pipes) waited that long for their end after the command itself had exited. The server's
children never run it: a child of the fork server ends with os._exit, which runs no atexit handler.

More: docs/design/engine.md, `autotuner/engine/measure/server_exit.py`.
"""

from __future__ import annotations

import atexit
import os
import signal

atexit.register(os._exit, 0)
signal.signal(signal.SIGINT, signal.default_int_handler)
