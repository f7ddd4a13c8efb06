"""autotuner.base.bytecode in real interpreters: a package installed without bytecode, where Python may not write it
(PYTHONDONTWRITEBYTECODE), stands for torch as uv installs it into a container image; a module beside it for the
command's own imports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE, MODULE = "bytecode_probe_pkg", "bytecode_probe_mod"

# A command: keep() (the probe package standing for torch), then its own import; its exit leaves the writer.
COMMAND = f"""
import os, sys
from autotuner.base import bytecode
kept = bytecode.keep(({PACKAGE!r},), whole=({PACKAGE!r},))
print("kept", kept)
print("prefix", os.environ.get("PYTHONPYCACHEPREFIX"))
import {MODULE}
if bytecode.folder().exists():
    print("stamp", bytecode.tree(({PACKAGE!r},)) / bytecode.STAMP)
"""


def _install(base: Path) -> Path:
    """A package (never imported by the command itself, as torch is imported by its fork server alone) whose
    `__init__` imports one module and nobody another, and a module the command imports; no bytecode."""
    site = base / "site"
    (site / PACKAGE).mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("from . import later\n")
    (site / PACKAGE / "later.py").write_text("LATER = 1\n")
    (site / PACKAGE / "lazy.py").write_text("LAZY = 3\n")  # imported by nobody: a compiler's module of its own time
    (site / f"{MODULE}.py").write_text("MODULE = 2\n")
    return site


def _env(tmp_path: Path, site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "AUTOTUNER_BYTECODE_CACHE")}
    env.update(PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), **extra)
    return env


def _command(tmp_path: Path, site: Path, **extra: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", COMMAND], env=_env(tmp_path, site, **extra), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"the writer left no {path}"


def test_a_first_command_runs_as_before_and_leaves_the_bytecode_the_next_ones_read_under_dash_b(tmp_path):
    site = _install(tmp_path)
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    first = _command(tmp_path, site)
    # the first command reads nothing from the folder (it would compile the standard library's modules again there)
    assert first["kept"] == first["prefix"] == "None", first
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    _wait_for(Path(first["stamp"]))  # the writer, left at the first command's exit
    kept = {p.name.split(".")[0]: p for p in [*folder.rglob(f"{PACKAGE}/*.pyc"), *folder.rglob(f"{MODULE}.*.pyc")]}
    # the command's own import, what the package imports, and the rest of the package (compiled whole)
    assert set(kept) == {MODULE, "__init__", "later", "lazy"}, sorted(folder.rglob("*"))
    assert any(folder.rglob("json/__init__.*.pyc"))  # the standard library's, which it reads from there from now on
    assert not (site / PACKAGE / "__pycache__").exists() and not (site / "__pycache__").exists()  # never beside
    second = _command(tmp_path, site)
    assert second["kept"] == second["prefix"] == str(Path(first["stamp"]).parent), second  # this installation's tree
    assert Path(second["kept"]).parent == folder
    # a child as the fork server runs (-B, the prefix inherited): -v names the file each module's code came from
    child = subprocess.run([sys.executable, "-B", "-v", "-c", f"import {MODULE}, {PACKAGE}.lazy"],
                           env=_env(tmp_path, site, PYTHONPYCACHEPREFIX=second["prefix"]), capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    for name in kept:
        assert f"code object from '{kept[name]}'" in child.stderr, child.stderr[-3000:]
    # a command that finds everything it imported there, and the stamp, leaves no writer
    code = (f"from autotuner.base import bytecode; kept = bytecode.keep(({PACKAGE!r},)); import {MODULE}; "
            f"print(bytecode.write_behind(kept, ({PACKAGE!r},)))")
    again = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, site), cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == "None", (again.stdout, again.stderr)


def test_an_install_with_its_bytecode_a_prefix_of_the_users_and_the_setting_off_are_left_alone(tmp_path):
    site = _install(tmp_path)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(site / PACKAGE)], check=True)
    assert _command(tmp_path, site)["kept"] == "None"
    bare = _install(tmp_path / "bare")
    assert _command(tmp_path, bare, PYTHONPYCACHEPREFIX=str(tmp_path / "mine"))["kept"] == "None"
    assert _command(tmp_path, bare, AUTOTUNER_BYTECODE_CACHE="0")["kept"] == "None"
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    assert not folder.exists()
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # a folder others may write: their bytecode would run in the commands
    refused = _command(tmp_path, bare)
    time.sleep(2)  # (a writer, had one been left, would have written the little there is by now)
    assert refused["kept"] == "None" and list(folder.iterdir()) == [], sorted(folder.rglob("*"))
    folder.chmod(0o700)  # the user's own: a first command, which leaves a writer
    _wait_for(Path(_command(tmp_path, bare)["stamp"]))


def test_a_writer_removes_the_trees_no_command_read_for_a_month(tmp_path):
    """Installations replaced (torch upgraded, another interpreter) leave trees no command reads again."""
    site = _install(tmp_path)
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    folder.mkdir(parents=True, mode=0o700)
    month = time.time() - 31 * 86400
    for name, read in (("old", month), ("recent", time.time() - 86400), ("unstamped", month)):
        (folder / name).mkdir()
        if name != "unstamped":
            (folder / name / "written").touch()
            os.utime(folder / name / "written", (read, read))
        os.utime(folder / name, (month, month))
    first = _command(tmp_path, site)
    _wait_for(Path(first["stamp"]))
    deadline = time.monotonic() + 60  # (the writer removes them after its stamp)
    while ((folder / "old").exists() or (folder / "unstamped").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in folder.iterdir()) == sorted(["recent", Path(first["stamp"]).parent.name])
