"""A client-side deadline on every PostgreSQL round trip (psycopg 3). More: docs/design/store.md."""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event

NO_DEADLINE = "_autotuner_no_deadline"


class Watchdog:
    """One thread for the whole process: shuts down the sockets of calls past their deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, int] = {}  # token -> fd
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self.fired = 0

    def arm(self, fd: int, timeout_s: float) -> int:
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = fd
            heapq.heappush(self._heap, (time.monotonic() + timeout_s, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()
            self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)  # disarmed already
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                now = time.monotonic()
                if deadline > now:
                    self._cond.wait(deadline - now)
                    continue
                heapq.heappop(self._heap)
                fd = self._armed.pop(token)
                # Under the lock: the call is still blocked on this fd (it disarms before the fd can close).
                self.fired += 1
                try:
                    sock = socket.socket(fileno=os.dup(fd))
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    finally:
                        sock.close()
                except OSError:
                    pass


WATCHDOG = Watchdog()


@contextmanager
def _bounded(conn: Any, timeout_s: float) -> Iterator[None]:
    if getattr(conn, NO_DEADLINE, False):
        yield
        return
    try:
        fd = conn.pgconn.socket
    except Exception:  # closed, or not connected: the call itself will say so
        yield
        return
    token = WATCHDOG.arm(fd, timeout_s)
    try:
        yield
    finally:
        WATCHDOG.disarm(token)


def _connection_class(timeout_s: float) -> Callable[..., Any]:
    import psycopg

    class Cursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, *args: Any, **kwargs: Any) -> Any:
            with _bounded(self.connection, timeout_s):
                return super().execute(*args, **kwargs)

        def executemany(self, *args: Any, **kwargs: Any) -> Any:
            with _bounded(self.connection, timeout_s):
                return super().executemany(*args, **kwargs)

    class Connection(psycopg.Connection):  # type: ignore[type-arg]
        def commit(self) -> None:
            with _bounded(self, timeout_s):
                super().commit()

        def rollback(self) -> None:
            with _bounded(self, timeout_s):
                super().rollback()

    def connect(*args: Any, **kwargs: Any) -> Any:
        kwargs["cursor_factory"] = Cursor
        return Connection.connect(*args, **kwargs)

    return connect


def install(engine: Engine, deadline_s: float) -> None:
    """Bound every round trip of `engine`'s psycopg connections by `deadline_s` (other drivers: nothing)."""
    if engine.dialect.driver != "psycopg":
        return
    connect = _connection_class(deadline_s)

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, conn_rec: Any, cargs: Any, cparams: Any) -> Any:
        return connect(*cargs, **cparams)


@contextmanager
def without_deadline(dbapi_connection: Any) -> Iterator[None]:
    setattr(dbapi_connection, NO_DEADLINE, True)
    try:
        yield
    finally:
        setattr(dbapi_connection, NO_DEADLINE, False)
