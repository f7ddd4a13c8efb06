"""torch.compile's remote caches over the database (autotuner/decorator/inductor_cache.py): a block compiled in one
process under `python -m autotuner run` with AUTOTUNER_COMPILE_SECRET set is loaded by a process with an empty
Inductor cache folder (another host, as Inductor sees it) from the database; an entry changed in the database is
not loaded; without a secret nothing is hooked. Inductor compiles for the CPU here. On SQLite: the signed files'
table on PostgreSQL is the shared compiles' (tests/integration/test_compile_share.py)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select, update

from autotuner.decorator import inductor_cache
from autotuner.store.database import Store
from db.engine import session_scope
from db.models import CompiledFile

ROOT = Path(__file__).resolve().parents[2]
SECRET = "0123456789abcdef" * 4


def _compile(url, folder, secret=SECRET):
    env = {**os.environ, "AUTOTUNER_DB_URL": url, "TORCHINDUCTOR_CACHE_DIR": str(folder)}
    env.pop("AUTOTUNER_COMPILE_SECRET", None)
    if secret:
        env["AUTOTUNER_COMPILE_SECRET"] = secret
    out = subprocess.run([sys.executable, "-m", "autotuner", "run", "--", "-m", "tests.support.compiled_block"],
                         capture_output=True, text=True, cwd=ROOT, timeout=500, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["matches"]
    return result["inductor"], out.stderr


def _kept(url):
    with session_scope(Store(url).engine) as s:
        return sorted({k for (k,) in s.execute(select(CompiledFile.cache_key))})


@pytest.mark.slow
def test_a_graph_kept_by_one_process_is_loaded_by_another_with_an_empty_cache_folder_unless_changed(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    first, _ = _compile(url, tmp_path / "first")
    assert first.get("fxgraph_cache_miss") == 1 and not first.get("fxgraph_cache_hit")
    assert "inductor/RemoteFxGraphCache" in _kept(url)
    second, _ = _compile(url, tmp_path / "second")
    assert second.get("fxgraph_cache_hit") == 1 and not second.get("fxgraph_cache_miss")
    with session_scope(Store(url).engine) as s:  # what a writer without the secret could leave
        s.execute(update(CompiledFile).values(data=b"import os  # not what was signed"))
    # the backend a third process would read through: the changed entry is a miss, said (Inductor compiles on a
    # miss, as the first process did)
    from torch._inductor.remote_cache import RemoteFxGraphCache

    inductor_cache.install(url, SECRET)  # (Inductor imported: hooked at once)
    try:
        backend = RemoteFxGraphCache.backend_override_cls()
        with session_scope(Store(url).engine) as s:
            key = s.scalars(select(CompiledFile.filename).where(
                CompiledFile.cache_key == "inductor/RemoteFxGraphCache")).first()
        with caplog.at_level(logging.WARNING):
            assert backend._get(key) is None
        assert "does not verify" in caplog.text
    finally:
        inductor_cache.uninstall()


def test_without_a_secret_nothing_is_hooked(tmp_path):
    from torch._inductor import config
    from torch._inductor.remote_cache import RemoteFxGraphCache

    before = (RemoteFxGraphCache.backend_override_cls, config.fx_graph_remote_cache)
    assert inductor_cache.install(f"sqlite:///{tmp_path / 'c.db'}", None) is False
    assert (RemoteFxGraphCache.backend_override_cls, config.fx_graph_remote_cache) == before
    assert not (tmp_path / "c.db").exists()
