"""`autotuner tune` handed to a worker running on this host, before the command imports anything heavy: the worker tunes
in its kept processes and this one relays the output. More: docs/design/service.md."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from autotuner.worker.command_socket import Lines, runtime_dir, send, socket_paths
from kernels._environment import env_flag, env_text

CONNECT_TIMEOUT_S = 1.0
HELLO_TIMEOUT_S = 5.0


EXEC_GAP_S = 2.0  # more than this between the process's start and autotuner's first import: it ran something else


def since_process_start() -> float | None:
    """Seconds since this process started (Linux), or None. Where a shell exec'd the command in its own process (started
    more than EXEC_GAP_S before autotuner's import), the time since that import."""
    imported = getattr(sys.modules.get("autotuner"), "IMPORTED_AT", None)
    ours = time.monotonic() - imported if imported is not None else None
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        process = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return ours
    if ours is not None and process - ours > EXEC_GAP_S:
        return ours
    return process


def wanted(argv: list[str]) -> bool:
    if not env_flag("AUTOTUNER_LOCAL_WORKER", default=True):
        return False
    if env_text("AUTOTUNER_GPUS"):  # several GPUs: tuned here (a worker measures on one)
        return False
    return not any(a in ("--here", "--queue", "--help", "--gpus") or a.startswith("--gpus=") for a in argv)


def hand_off(argv: list[str]) -> int | None:
    """Run `autotuner tune ARGV` in a local worker: its exit status, or None where no worker took it."""
    if not wanted(argv):
        return None
    sockets = socket_paths(runtime_dir(env_text("AUTOTUNER_RUNTIME_DIR")))
    wait = "--wait" in argv
    for i, path in enumerate(sockets):
        code = _through(str(path), argv, wait_if_busy=wait and i == len(sockets) - 1)
        if code is not None:
            return code
    if sockets:
        sys.stderr.write("tuning in this process\n")  # no worker took it (each said why), or none answered
    return None


def _request(argv: list[str]) -> dict[str, Any]:
    columns = None
    if sys.stderr.isatty():
        try:
            columns = os.get_terminal_size(sys.stderr.fileno()).columns
        except OSError:
            pass
    return {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "stdout_tty": sys.stdout.isatty(),
            "stderr_tty": sys.stderr.isatty(), "columns": columns, "startup_s": since_process_start()}


def _through(path: str, argv: list[str], *, wait_if_busy: bool) -> int | None:
    """One command socket: the command's exit status, or None where this worker did not take it (gone, busy while another
    may be idle, declined)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(path)
        send(conn, _request(argv))
        conn.settimeout(HELLO_TIMEOUT_S)
        lines = Lines(conn)
        hello = lines.read()
        conn.settimeout(None)
    except (OSError, ValueError):  # a socket left by a worker that died, or one not answering
        conn.close()
        return None
    if hello is None or "worker" not in hello:
        conn.close()
        return None
    if hello.get("busy"):
        if not wait_if_busy:
            sys.stderr.write(f"worker {hello['worker']} on this host is busy with its {hello['busy']} (--wait waits "
                             "for it)\n")
            conn.close()
            return None
        checked = _check_here(argv)  # before waiting: a mistake is told now, not after the worker's job
        if checked != 0:
            conn.close()
            return checked
        sys.stderr.write(f"worker {hello['worker']} on this host takes this command after its {hello['busy']}\n")
    try:
        return _relay(lines, str(hello["worker"]))
    except KeyboardInterrupt:
        return 130  # closing our end interrupts the worker's tuning (its run is marked interrupted)
    finally:
        conn.close()


def _check_here(argv: list[str]) -> int:
    """`autotuner tune ARGV --check` in a new process (it imports what parsing a problem needs): its exit status,
    its messages on this command's streams."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "autotuner", "tune", *argv, "--here", "--check"]).returncode


def _relay(lines: Lines, worker: str) -> int | None:
    started = False
    while True:
        lost: Exception | None = None
        try:
            message = lines.read()
        except (OSError, ValueError) as exc:
            message, lost = None, exc
        if message is None:
            if not started:
                return None
            sys.stderr.write(f"error: worker {worker} stopped while running this command"
                             f"{f' ({lost})' if lost else ''}; what it measured is in the database\n")
            return 1
        if "declined" in message:
            sys.stderr.write(f"worker {worker} on this host did not take this command ({message['declined']})\n")
            return None
        if "start" in message:
            started = True
        for key, stream in (("out", sys.stdout), ("err", sys.stderr)):
            if key in message:
                stream.write(str(message[key]))
                stream.flush()
        if "exit" in message:
            return int(message["exit"])
