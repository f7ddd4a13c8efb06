"""Triton compile-cache files kept in the database for other hosts (autotuner.engine.compile_share), each with
an HMAC-SHA256 under the operator's secret and the signer that secret is: `get` returns only this signer's files
whose mac verifies.

    put(engine, secret, key, "copy.cubin", data)
    files = get(engine, secret, key, ["copy.cubin", "copy.json"])    # {name: bytes}, verified ones only
"""

from __future__ import annotations

import hashlib
import hmac

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from db.engine import session_scope
from db.models import CompiledFile


def mac(secret: str, key: str, filename: str, data: bytes) -> str:
    """The file's signature: what it is (its cache key and name) and what it holds, under the secret."""
    h = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    for part in (key.encode(), b"\0", filename.encode(), b"\0", data):
        h.update(part)
    return h.hexdigest()


def signer(secret: str) -> str:
    """Which secret signs: an HMAC of a constant under it, shortened (it says nothing of the secret)."""
    return hmac.new(secret.encode(), b"autotuner compiled files", hashlib.sha256).hexdigest()[:16]


def get(engine: Engine, secret: str, key: str, filenames: list[str]) -> tuple[dict[str, bytes], list[str]]:
    """The files of `key` among `filenames` whose mac verifies, and the names of those stored that did not."""
    with session_scope(engine) as s:
        rows = s.execute(select(CompiledFile.filename, CompiledFile.data, CompiledFile.mac).where(
            CompiledFile.signer == signer(secret), CompiledFile.cache_key == key,
            CompiledFile.filename.in_(filenames))).all()
    good: dict[str, bytes] = {}
    bad: list[str] = []
    for name, data, signed in rows:
        if hmac.compare_digest(signed, mac(secret, key, name, bytes(data))):
            good[name] = bytes(data)
        else:
            bad.append(name)
    return good, bad


def put(engine: Engine, secret: str, key: str, filename: str, data: bytes) -> None:
    """Keep a file. One this signer already kept under that key and name stays where it verifies (another host
    wrote the same compile), and is replaced where it does not (a row no one with the secret wrote)."""
    signed = mac(secret, key, filename, data)
    try:
        with session_scope(engine) as s:
            s.add(CompiledFile(signer=signer(secret), cache_key=key, filename=filename, data=data, mac=signed))
    except IntegrityError:
        with session_scope(engine) as s:
            row = s.scalars(select(CompiledFile).where(CompiledFile.signer == signer(secret),
                                                       CompiledFile.cache_key == key,
                                                       CompiledFile.filename == filename)).one_or_none()
            if row is not None and not hmac.compare_digest(row.mac, mac(secret, key, filename, bytes(row.data))):
                row.data, row.mac = data, signed
