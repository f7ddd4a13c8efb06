"""Preloaded by a test's fork server before autotuner.engine.measure.server_exit: at the server's interpreter tear-down it
writes the file named by TEARDOWN_MARK. Registered first, it would run last (atexit's order is the reverse): the
server ending at once (server_exit) never gets to it."""

from __future__ import annotations

import atexit
import os
from pathlib import Path


def _mark() -> None:
    Path(os.environ["TEARDOWN_MARK"]).write_text("the fork server ran its interpreter's tear-down\n")


atexit.register(_mark)
