"""Imported by the fork server alone, before anything else it imports (autotuner.engine.processes.PRELOAD): Ctrl-C
is ignored while the server imports torch and Triton. The server shares its command's process group, so a
terminal's Ctrl-C reaches it too; Python's fork server ignores SIGINT only once its imports are done, and one that
came during them (seconds: a worker stopped as it started its first job) killed the server with a traceback of its
own under the command's. autotuner.engine.server_exit, imported last, puts Python's handler back, which the server
saves and gives each child it makes, as before."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
