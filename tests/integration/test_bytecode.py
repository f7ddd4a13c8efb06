"""autotuner.base.bytecode in real interpreters: a package installed without bytecode, where Python may not write it
(PYTHONDONTWRITEBYTECODE), stands for torch as uv installs it into a container image."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "bytecode_probe_pkg"

# A command's start: keep() (the probe package standing for torch), then, once the background writer has left its
# stamp, a child under -B (as the fork server and spawned processes run) importing the package with -v, which
# names the file each module's code came from.
SCRIPT = f"""
import os, subprocess, sys, time
from autotuner.base import bytecode
kept = bytecode.keep(({PACKAGE!r},))
print("kept", kept)
if kept is not None:
    stamp = bytecode._stamp(kept, ({PACKAGE!r},))
    deadline = time.monotonic() + 120
    while not stamp.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("stamp", stamp.exists())
    print("again", bytecode._write_ahead(kept, ({PACKAGE!r},)))
    child = subprocess.run([sys.executable, "-B", "-v", "-c", "import {PACKAGE}"], capture_output=True, text=True)
    print("child", [line for line in child.stderr.splitlines() if "code object from" in line and {PACKAGE!r} in line])
"""


def _package(tmp_path: Path) -> Path:
    source = tmp_path / "site"
    (source / PACKAGE).mkdir(parents=True)
    (source / PACKAGE / "__init__.py").write_text("VALUE = 42\n")
    return source


def _run(tmp_path: Path, source: Path, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "AUTOTUNER_BYTECODE_CACHE")}
    environ.update(PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / "cache"),
                   PYTHONPATH=os.pathsep.join([str(source), str(ROOT)]), **env)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=environ, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_package_without_bytecode_is_kept_in_the_cache_folder_and_read_by_children_under_dash_b(tmp_path):
    source = _package(tmp_path)
    out = _run(tmp_path, source)
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    assert f"kept {folder}" in out, out
    assert "stamp True" in out and "again None" in out, out  # written once; the next command starts no writer
    kept = list(folder.rglob(f"{PACKAGE}/__init__*.pyc"))
    assert len(kept) == 1, sorted(folder.rglob("*"))
    assert not (source / PACKAGE / "__pycache__").exists()  # never beside the source
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    child = out.split("child ", 1)[1]
    assert str(kept[0]) in child, out  # the child, started with -B, imported the kept bytecode


def test_an_install_with_its_bytecode_a_prefix_of_the_users_and_the_setting_off_are_left_alone(tmp_path):
    source = _package(tmp_path)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(source)], check=True)
    assert "kept None" in _run(tmp_path, source)
    bare = _package(tmp_path / "bare")
    assert "kept None" in _run(tmp_path, bare, PYTHONPYCACHEPREFIX=str(tmp_path / "mine"))
    assert "kept None" in _run(tmp_path, bare, AUTOTUNER_BYTECODE_CACHE="0")
    assert not (tmp_path / "cache" / "autotuner" / "pycache").exists()
    assert "kept " + str(tmp_path / "cache" / "autotuner" / "pycache") in _run(tmp_path, bare)  # (the same, on)
