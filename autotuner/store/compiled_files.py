"""The store's interface for Triton's compile-cache files shared between hosts (db.compiled_files keeps them, signed). A
plain SQLite file goes through sqlite3 (a compile process asks before its first compile), any other URL through one
engine per URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_places: dict[str, Any] = {}


def _place(url: str | None) -> Any:
    from db.sqlite_reads import plain_path

    path = plain_path(url)
    if path is not None:
        return path
    from db.basics import default_url
    from db.engine import make_engine

    url = url or default_url()
    if url not in _places:
        _places[url] = make_engine(url)
    return _places[url]


class CompiledFiles:
    """The compile-cache files in the database at `url` (None: the default file), signed under `secret`."""

    def __init__(self, url: str | None, secret: str) -> None:
        self.url, self.secret = url, secret

    def prepare(self) -> None:
        """Make now what the first `get` needs (the modules, the engine where one is used)."""
        from db import compiled_files  # noqa: F401

        _place(self.url)

    def missing(self) -> bool:
        """Whether the database is a SQLite file not made yet (nothing kept, and nothing to say about it)."""
        place = _place(self.url)
        return isinstance(place, Path) and not place.exists()

    def get(self, key: str, filenames: list[str]) -> tuple[dict[str, bytes], list[str]]:
        """The files of Triton's cache `key` that verify, by name, and the names of those that do not."""
        from db import compiled_files

        return compiled_files.get(_place(self.url), self.secret, key, filenames)

    def put(self, key: str, filename: str, data: bytes) -> None:
        from db import compiled_files

        compiled_files.put(_place(self.url), self.secret, key, filename, data)
