"""A TCP proxy the tests control, between autotuner and the real PostgreSQL server: an outage on demand.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = pg_url_through(proxy)
        proxy.stop()     # the server is gone: open connections are cut, new ones refused
        proxy.freeze()   # the server stalls: connections open, bytes accepted, nothing answered
        proxy.resume()   # back to normal
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Any


class TcpProxy:
    def __init__(self, host: str, port: int, listen_port: int = 0) -> None:
        self.target = (host, port)
        self.mode = "open"
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._listener: socket.socket | None = None
        self.port = listen_port
        self._closed = False
        self._listen()

    # -- control --------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Refuse new connections and cut every open one, as a stopped server does."""
        with self._lock:
            self.mode = "stopped"
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            for a, b in self._conns:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            self._conns.clear()

    def freeze(self) -> None:
        """Keep every connection open and accept new ones, but forward nothing: a stalled server."""
        with self._lock:
            self.mode = "frozen"

    def resume(self) -> None:
        with self._lock:
            was = self.mode
            self.mode = "open"
        if was == "stopped":
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.stop()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------
    def _listen(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self.mode == "stopped":
                    client.close()
                    server.close()
                    return
                self._conns.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while True:
            if self.mode == "frozen":
                threading.Event().wait(0.05)
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.1)
            except (OSError, ValueError):
                return  # closed by stop()
            if self.mode == "frozen":
                continue
            for s in ready:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for x in (a, b):
                        try:
                            x.close()
                        except OSError:
                            pass
                    with self._lock:
                        if (a, b) in self._conns:
                            self._conns.remove((a, b))
                    return
                try:
                    peers[s].sendall(data)
                except OSError:
                    return


def url_through(pg_url: str, proxy: TcpProxy) -> str:
    """A PostgreSQL URL with its host and port replaced by the proxy's."""
    from sqlalchemy.engine import make_url

    return make_url(pg_url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)

