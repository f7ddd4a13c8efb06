"""A real `autotuner serve` process on a free loopback port, for the API and page tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_server(db_url: str, **env: str):
    port = _free_port()
    full_env = {**os.environ, "AUTOTUNER_CONFIG_CACHE_S": "0", **env}
    full_env.pop("AUTOTUNER_URL", None)
    if "AUTOTUNER_TOKEN" not in env:
        full_env.pop("AUTOTUNER_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "serve", "--port", str(port), "--db", db_url],
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {proc.stdout.read() if proc.stdout else ''}") from None
                time.sleep(0.1)
        client = httpx.Client(base_url=base, timeout=10)
        client.server_pid = proc.pid  # type: ignore[attr-defined]
        yield client
    finally:
        proc.terminate()
        proc.wait(10)
