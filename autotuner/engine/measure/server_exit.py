"""Imported by the fork server alone (processes.PRELOAD): when the command that started it exits, the server ends at
once, skipping torch's and Triton's teardown, during which it held the command's output pipes open (so `$(autotuner tune
--json)` waited). The server's children end with os._exit and never run it."""

from __future__ import annotations

import atexit
import os
import signal

atexit.register(os._exit, 0)
signal.signal(signal.SIGINT, signal.default_int_handler)
