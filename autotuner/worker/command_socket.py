"""A running worker's command socket: `autotuner tune` on this host hands its command to the worker, which tunes in its
kept processes. More: docs/design/service.md."""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUFFIX = ".sock"
REQUEST_TIMEOUT_S = 5.0  # a connection that sends no request line in this long is dropped


def runtime_dir(configured: str | None = None) -> Path:
    """Where the sockets are: `configured` (AUTOTUNER_RUNTIME_DIR), else the user's runtime folder."""
    if configured:
        return Path(configured).expanduser()
    import warnings

    from platformdirs import user_runtime_dir

    with warnings.catch_warnings():  # without XDG_RUNTIME_DIR it warns, on every command, of its /tmp fallback
        warnings.simplefilter("ignore")
        return Path(user_runtime_dir("autotuner", appauthor=False))


def socket_paths(folder: Path) -> list[Path]:
    """The command sockets in `folder`, oldest first (a worker started first is the one a command tries first)."""
    try:
        found = [p for p in folder.iterdir() if p.name.endswith(SUFFIX)]
    except OSError:
        return []

    def started(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return float("inf")

    return sorted(found, key=started)


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


class Lines:
    """JSON lines read from a socket."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.buf = b""

    def read(self) -> dict[str, Any] | None:
        """The next message, or None at the end of the stream."""
        while b"\n" not in self.buf:
            chunk = self.conn.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError(f"not a message: {line[:200]!r}")
        return message


@dataclass
class Request:
    """A command handed to this worker: `autotuner tune` with `argv` after `tune`, run in `cwd` with `env` (the
    command's environment), its output written to `conn`; `startup_s`: the command's process start-up before it
    handed the command over."""

    conn: socket.socket
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout_tty: bool = False
    stderr_tty: bool = False
    columns: int | None = None
    startup_s: float | None = None
    gone: threading.Event = field(default_factory=threading.Event)  # the command closed its end
    done: bool = False  # the command ended here: the command closing its end now interrupts nothing
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def parse(cls, conn: socket.socket, message: dict[str, Any]) -> Request:
        argv, cwd, env = message.get("argv"), message.get("cwd"), message.get("env")
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(cwd, str)
                and isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ValueError("a request needs argv (a list of strings), cwd and env (strings)")
        columns, startup = message.get("columns"), message.get("startup_s")
        return cls(conn, argv, cwd, env, bool(message.get("stdout_tty")), bool(message.get("stderr_tty")),
                   columns if isinstance(columns, int) and columns > 0 else None,
                   float(startup) if isinstance(startup, (int, float)) else None)

    def send(self, message: dict[str, Any]) -> bool:
        """Write a message; False (and `gone` set) once the command has closed its end."""
        if self.gone.is_set():
            return False
        try:
            send(self.conn, message)
            return True
        except OSError:
            self.gone.set()
            return False

    def watch(self, on_gone: Callable[[], None]) -> threading.Thread:
        """A thread that calls `on_gone` if the command closes its end before `end()`."""
        def run() -> None:
            try:
                while self.conn.recv(1024):
                    pass
            except OSError:
                pass
            with self.lock:
                if not self.done:
                    self.gone.set()
                    on_gone()

        thread = threading.Thread(target=run, name="command-socket-watch", daemon=True)
        thread.start()
        return thread

    def end(self) -> None:
        """The command is over here: the command closing its end from now on interrupts nothing."""
        with self.lock:
            self.done = True

    def decline(self, reason: str) -> None:
        """Give the command back (before it wrote anything): it runs where it was typed."""
        self.end()
        self.send({"declined": reason})
        self._close()

    def finish(self, code: int) -> None:
        """Send the exit status and close the connection."""
        self.end()
        self.send({"exit": code})
        self._close()

    def _close(self) -> None:
        self.gone.set()
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


class CommandSocket:
    """The listening side, owned by a worker: `open()` binds the socket and starts accepting; `take(timeout)`
    hands the worker's loop the next command (or None); `close()` removes the socket."""

    def __init__(self, folder: Path, name: str, busy: Callable[[], str | None]) -> None:
        self.folder = folder
        self.name = name
        self.busy = busy
        self.path = folder / f"{os.getpid()}{SUFFIX}"
        self._requests: queue.Queue[Request] = queue.Queue()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path.unlink(missing_ok=True)  # a socket left by a process with this pid, long gone
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(16)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name="command-socket", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            try:
                conn.settimeout(REQUEST_TIMEOUT_S)
                message = Lines(conn).read()
                conn.settimeout(None)
                if message is None:
                    conn.close()
                    continue
                request = Request.parse(conn, message)
            except (OSError, ValueError) as exc:
                try:
                    send(conn, {"declined": f"bad request: {exc}"})
                except OSError:
                    pass
                conn.close()
                continue
            if request.send({"worker": self.name, "busy": self.busy()}):
                self._requests.put(request)

    def take(self, timeout: float = 0.0) -> Request | None:
        """The next command handed over, waiting up to `timeout` seconds for one."""
        try:
            return self._requests.get(timeout=timeout) if timeout > 0 else self._requests.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread waiting in accept()
            except OSError:
                pass
            sock.close()
        while (request := self.take()) is not None:  # taken, never run: the command runs where it was typed
            request.decline(f"worker {self.name} stopped")
