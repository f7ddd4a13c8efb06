"""Compiles shared between hosts through the database (autotuner.engine.measure.compile_share), with Triton's real
compiler: each "host" is a process of its own with a Triton cache folder of its own, compiling for sm_90 on the CPU
(tests/support/compile_share_probe.py) under the environment a trial worker or compile-pool process gets."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select, update

from autotuner.engine.measure import compile_share, processes
from autotuner.store.database import Store
from db import compiled_files
from db.engine import session_scope
from db.models import CompiledFile

ROOT = Path(__file__).resolve().parents[2]
KERNEL = """
import triton.language as tl
from triton.runtime.jit import JITFunction as jit


@jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 3, mask=i < n)
"""


def child_env(secret: str | None, url: str) -> dict[str, str]:
    """What a trial worker started now would see, after `share`; the suite's interpreter left out."""
    try:
        compile_share.share(secret, url)
        env = processes.environment()
    finally:
        compile_share.share(None, None)
    env.pop("TRITON_INTERPRET", None)
    return env


def host(tmp_path: Path, name: str, env: dict[str, str], block: int = 64) -> dict:
    kernel = tmp_path / "kernel.py"
    if not kernel.exists():
        kernel.write_text(KERNEL)
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "compile_share_probe.py"), str(kernel), str(block)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**env, "TRITON_CACHE_DIR": str(tmp_path / name)})
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}  # made, cubin, asm


def rows(store: Store) -> list[CompiledFile]:
    with session_scope(store.engine) as s:
        return list(s.scalars(select(CompiledFile)))


def test_a_second_host_loads_what_the_first_compiled_and_never_a_file_it_cannot_verify(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = Store(url)
    env = child_env("s3cret-of-16-bytes", url)
    assert env["TRITON_CACHE_MANAGER"] == compile_share.MANAGER and env["AUTOTUNER_COMPILE_SECRET"] == "s3cret-of-16-bytes"

    first = host(tmp_path, "a", env)
    assert first["made"] == 1
    kept = rows(store)
    names = {r.filename.rsplit(".", 1)[-1] for r in kept}
    assert {"cubin", "json"} <= names and not names & {"ttir", "ttgir", "llir", "ptx"}  # no intermediate IR
    assert all(r.mac == compiled_files.mac("s3cret-of-16-bytes", r.cache_key, r.filename, r.data) for r in kept)

    second = host(tmp_path, "b", env)  # a fresh cache folder: another host, a new container
    assert second["made"] == 0 and second["cubin"] == first["cubin"] and second["shared"] == first["shared"]
    assert second["asm"] == ["cubin"] and "ptx" in first["asm"]  # loaded from its binary; the IR stayed home

    # a host under another secret loads none of them: it compiles, keeps its own, and the first's stay
    other = host(tmp_path, "c", child_env("another", url))
    assert other["made"] == 1 and other["cubin"] == first["cubin"]
    mine = compiled_files.signer("s3cret-of-16-bytes")
    assert {(r.filename, r.mac) for r in rows(store) if r.signer == mine} == {(r.filename, r.mac) for r in kept}
    assert len(rows(store)) == 2 * len(kept)
    assert host(tmp_path, "c2", child_env("another", url))["made"] == 0

    # a row written without the secret (the cubin replaced): not loaded, compiled over, and replaced
    cubin = next(r for r in kept if r.filename.endswith(".cubin"))
    with session_scope(store.engine) as s:
        s.execute(update(CompiledFile).where(CompiledFile.id == cubin.id).values(data=b"\x7fELF not a kernel"))
    tampered = host(tmp_path, "d", env)
    assert tampered["made"] == 1 and tampered["cubin"] == first["cubin"]
    assert "does not verify" in tampered["stderr"]
    again = next(r for r in rows(store) if r.id == cubin.id)
    assert again.data == cubin.data and again.mac == cubin.mac
    assert host(tmp_path, "e", env)["made"] == 0


def test_a_cache_folder_a_sharing_host_wrote_stays_readable_by_triton_alone(tmp_path):
    """A process with no sharing (the user's own, launching the tuned kernel) reads the same Triton cache folder
    as the trial workers that shared: Triton's RemoteCacheManager left its group files there in its own layout (a
    list of names), which Triton's FileCacheManager failed on (AttributeError: 'list' object has no attribute
    'items') instead of loading the kernel. Neither a host that compiled nor one that loaded may leave one."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    Store(url)
    env, plain = child_env("s3cret-of-16-bytes", url), child_env(None, url)
    assert host(tmp_path, "a", env)["made"] == 1
    assert host(tmp_path, "a", plain)["made"] == 0  # the first host's own process, Triton alone: loads it
    assert host(tmp_path, "b", env)["made"] == 0  # a second host, loading the first's
    assert host(tmp_path, "b", plain)["made"] == 0
    groups = [json.loads(p.read_text()) for p in tmp_path.glob("[ab]/*/__grp__*")]
    assert len(groups) == 2 and all(isinstance(g["child_paths"], dict) for g in groups)


def test_without_a_secret_or_under_a_cache_manager_of_the_users_nothing_is_shared(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    store = Store(url)
    env = child_env(None, url)
    assert "TRITON_REMOTE_CACHE_BACKEND" not in env
    assert host(tmp_path, "a", env)["made"] == 1 and host(tmp_path, "b", env)["made"] == 1
    assert rows(store) == []
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:FileCacheManager")
    assert not compile_share.share("s3cret-of-16-bytes", url) and "TRITON_REMOTE_CACHE_BACKEND" not in processes.environment()


def test_a_host_loads_what_its_own_cache_holds_without_asking_the_database(tmp_path):
    """Triton's RemoteCacheManager asks the backend for every file even when its file cache holds it, so a host's
    own compile, with the database gone, was compiled again (and every load of one read the database)."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    Store(url)
    assert host(tmp_path, "a", child_env("s3cret-of-16-bytes", url))["made"] == 1
    (tmp_path / "shared.db").rename(tmp_path / "gone.db")  # (reading a missing file fails: no such table)
    again = host(tmp_path, "a", child_env("s3cret-of-16-bytes", url))
    assert again["made"] == 0 and "compiled files not" not in again["stderr"]
    assert host(tmp_path, "b", child_env("s3cret-of-16-bytes", url))["made"] == 1  # a fresh cache still asks, and compiles


def test_a_database_that_cannot_be_reached_is_a_compile_as_usual(tmp_path):
    env = child_env("s3cret-of-16-bytes", f"sqlite:///{tmp_path / 'missing' / 'nowhere.db'}")
    done = host(tmp_path, "a", env)
    assert done["made"] == 1 and "compiled files not" in done["stderr"]


def test_compiled_files_keep_their_bytes_and_signatures_on_postgresql(pg_url):
    """Several hosts share one database through PostgreSQL: bytes (NUL and high bytes among them) come back as
    written, a second put of the same file keeps the first, another signer's files are apart, a bad row is replaced."""
    store = Store(pg_url)
    data = bytes(range(256)) * 64
    compiled_files.put(store.engine, "s3cret-of-16-bytes", "KEY", "k.cubin", data)
    compiled_files.put(store.engine, "s3cret-of-16-bytes", "KEY", "k.cubin", data)
    compiled_files.put(store.engine, "other", "KEY", "k.cubin", b"theirs")
    assert compiled_files.get(store.engine, "s3cret-of-16-bytes", "KEY", ["k.cubin", "k.json"]) == ({"k.cubin": data}, [])
    assert compiled_files.get(store.engine, "other", "KEY", ["k.cubin"]) == ({"k.cubin": b"theirs"}, [])
    with session_scope(store.engine) as s:
        s.execute(update(CompiledFile).where(CompiledFile.signer == compiled_files.signer("s3cret-of-16-bytes"))
                  .values(data=b"forged"))
    assert compiled_files.get(store.engine, "s3cret-of-16-bytes", "KEY", ["k.cubin"]) == ({}, ["k.cubin"])
    compiled_files.put(store.engine, "s3cret-of-16-bytes", "KEY", "k.cubin", data)
    assert compiled_files.get(store.engine, "s3cret-of-16-bytes", "KEY", ["k.cubin"]) == ({"k.cubin": data}, [])


def test_a_process_about_to_compile_makes_the_backends_engine_before_its_first_lookup(tmp_path, monkeypatch):
    """A trial worker or pool process starting up prepares the backend (the database modules, the engine) beside
    its CUDA context, so that its first cache lookup does not pay for them; without a secret it prepares nothing.
    A plain SQLite file needs no engine: it is read through sqlite3, and SQLAlchemy is not imported for it."""
    from autotuner.engine.measure import compile_share_backend as backend
    from autotuner.store import compiled_files as files

    url = f"sqlite:///{tmp_path / 'shared.db'}?timeout=30"  # (options: not a plain file, so an engine)
    Store(url)
    monkeypatch.setattr(files, "_places", {})
    monkeypatch.setenv(compile_share.URL_VAR, url)
    monkeypatch.delenv(compile_share.SECRET_VAR, raising=False)
    backend.prepare()
    assert files._places == {}
    monkeypatch.setenv(compile_share.SECRET_VAR, "s3cret-of-16-bytes")
    backend.prepare()
    engine = files._places[url]
    assert backend.DatabaseBackend("KEY").get(["k.cubin"]) == {} and files._places == {url: engine}
    code = ("import sys\n"
            "from autotuner.engine.measure import compile_share_backend as backend\n"
            "from autotuner.store import compiled_files as files\n"
            "backend.prepare()\n"
            "assert backend.DatabaseBackend('KEY').get(['k.cubin']) == {}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy')[:3], files._places)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, compile_share.SECRET_VAR: "s3cret-of-16-bytes",
                              compile_share.URL_VAR: f"sqlite:///{tmp_path / 'shared.db'}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "{}"]


def test_the_sqlite_path_and_the_engines_read_each_others_files(tmp_path):
    """A plain SQLite file's files through sqlite3 (the trial workers' and pools' way) and through an engine (any
    other URL's way) are one table's rows: each reads what the other wrote, bytes as written, a second put keeps the
    first, another signer's files apart, a row that does not verify reported and then replaced."""
    path = tmp_path / "shared.db"
    store = Store(f"sqlite:///{path}")
    data = bytes(range(256)) * 64
    compiled_files.put(path, "s3cret-of-16-bytes", "KEY", "k.cubin", data)
    compiled_files.put(path, "s3cret-of-16-bytes", "KEY", "k.cubin", b"a second compile")
    compiled_files.put(store.engine, "s3cret-of-16-bytes", "KEY", "k.json", b"{}")
    compiled_files.put(store.engine, "other", "KEY", "k.cubin", b"theirs")
    for where in (path, store.engine):
        assert compiled_files.get(where, "s3cret-of-16-bytes", "KEY", ["k.cubin", "k.json", "k.ptx"]) == (
            {"k.cubin": data, "k.json": b"{}"}, [])
        assert compiled_files.get(where, "other", "KEY", ["k.cubin"]) == ({"k.cubin": b"theirs"}, [])
    assert all(r.created_at is not None for r in rows(store))
    with session_scope(store.engine) as s:
        s.execute(update(CompiledFile).where(CompiledFile.signer == compiled_files.signer("s3cret-of-16-bytes"),
                                             CompiledFile.filename == "k.cubin").values(data=b"forged"))
    assert compiled_files.get(path, "s3cret-of-16-bytes", "KEY", ["k.cubin"]) == ({}, ["k.cubin"])
    compiled_files.put(path, "s3cret-of-16-bytes", "KEY", "k.cubin", data)
    assert compiled_files.get(store.engine, "s3cret-of-16-bytes", "KEY", ["k.cubin"]) == ({"k.cubin": data}, [])
    missing = tmp_path / "missing.db"
    with pytest.raises(sqlite3.OperationalError):  # a file that is not there is a database away: none is made
        compiled_files.get(missing, "s3cret-of-16-bytes", "KEY", ["k.cubin"])
    assert not missing.exists()
