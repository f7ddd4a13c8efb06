"""Preloaded first by a test's fork server: it writes the file named by PRELOAD_MARK
and waits (up to a minute) until the file named by PRELOAD_RELEASE exists: a server held in its imports."""

from __future__ import annotations

import os
import time
from pathlib import Path

Path(os.environ["PRELOAD_MARK"]).touch()
_deadline = time.monotonic() + 60
while not Path(os.environ["PRELOAD_RELEASE"]).exists() and time.monotonic() < _deadline:
    time.sleep(0.02)
