"""Shared fixtures. Kernels run through Triton's interpreter when there is no CUDA device."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

import kernels  # noqa: F401  (selects the interpreter before triton's jit runs)
from autotuner.base.device import DeviceInfo, current_device
from kernels._checks import poison_outputs

# The user's own data folder (the default database, the kept binaries) is never touched by a test: every process of
# the run, those a test starts included, finds it here instead, and a test that writes into it fails (below).
USER_DATA = Path(tempfile.mkdtemp(prefix="autotuner-tests-user-data-"))
USER_CACHE = Path(tempfile.mkdtemp(prefix="autotuner-tests-user-cache-"))
os.environ["XDG_DATA_HOME"] = str(USER_DATA)
os.environ["XDG_CACHE_HOME"] = str(USER_CACHE)

# The suite's own decorated kernels live in tests.*: the workers its tests start may import them for a job. What a
# worker refuses (anything else) is checked where AUTOTUNER_KERNEL_MODULES is left out (tests/integration/test_worker.py).
os.environ.setdefault("AUTOTUNER_KERNEL_MODULES", "tests")
# No command of the suite starts a bytecode fill (autotuner.base.bytecode, on where torch was installed without its
# bytecode): its processes would compete with the tests for the machine's few cores.
# tests/integration/test_bytecode.py turns it on for its own commands.
os.environ.setdefault("AUTOTUNER_BYTECODE_CACHE", "0")

poison_outputs(True)  # every output in the tests starts as NaN, so an unwritten element fails


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the README's test command): two processes where the kernels run in the interpreter; one where
    they run on a GPU, whose timings must not share it with another test's."""
    from kernels._backend import cuda_device_count

    return 1 if cuda_device_count() else min(2, os.cpu_count() or 1)


TIERS = ("unit", "integration", "gpu")  # tests/<tier>: pyproject.toml's markers say what each holds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test is marked with its tier, from the folder it lives in (tests/unit/<room>, tests/integration,
    tests/gpu): `pytest -m unit` runs the fast tier."""
    tests = Path(__file__).resolve().parent
    for item in items:
        folder = Path(str(item.path)).resolve().relative_to(tests).parts[0]
        if folder in TIERS:
            item.add_marker(getattr(pytest.mark, folder))


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(autouse=True)
def _never_the_users_data(request):
    """Fails a test that wrote into the user's data folder (the default database): a test names its own."""
    yield
    written = _written(USER_DATA)
    if written:
        shutil.rmtree(USER_DATA / written[0].split(os.sep)[0], ignore_errors=True)
        pytest.fail(f"{request.node.nodeid} wrote into the user's data folder (give it a database of its own): "
                    f"{', '.join(written[:5])}", pytrace=False)


@pytest.fixture(autouse=True)
def _own_runtime_dir(tmp_path_factory, monkeypatch):
    """Each test's workers open their command sockets in a folder of its own: a `tune` in one test is never handed to a
    worker of another (or to a worker running on the developer's machine)."""
    monkeypatch.setenv("AUTOTUNER_RUNTIME_DIR", str(tmp_path_factory.mktemp("run")))


@pytest.fixture(scope="session")
def device() -> DeviceInfo:
    return current_device()


@pytest.fixture
def small_smem_device() -> DeviceInfo:
    """A device with an sm_75-class 64 KiB shared-memory limit, to exercise the constraint."""
    return DeviceInfo("Small GPU", (7, 5), 40, 16 << 30, 65536, "cuda:0")


def pick_configs(valid: list[dict], default: dict, n_random: int, seed: int) -> list[dict]:
    """The smallest and largest tiles, the default, and a few seeded random ones; no duplicates."""

    def tile(c: dict) -> int:
        size = 1
        for k, v in c.items():
            if k.startswith("BLOCK") or k == "ROWS":
                size *= v
        return size

    chosen = [min(valid, key=tile), max(valid, key=tile), default]
    chosen += random.Random(seed).sample(valid, min(n_random, len(valid)))
    out, seen = [], set()
    for c in chosen:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def pytest_report_header(config: pytest.Config) -> str:
    return f"autotuner: TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')}, device={current_device().key}"


from benchmarks.fault_soak import PG_URL, fresh_pg_database  # noqa: F401, E402  (PG_URL: AUTOTUNER_TEST_PG_URL)


def _fresh_pg_database():
    return fresh_pg_database("autotuner_test")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    """A fresh database on each backend: a SQLite file, and a new database on the real PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'r.db'}"
        return
    with _fresh_pg_database() as pg:
        yield pg


@pytest.fixture
def pg_url():
    """A fresh database on the real PostgreSQL server, for PostgreSQL-only behaviour."""
    with _fresh_pg_database() as pg:
        yield pg
