"""autotuner.base.bytecode in real interpreters: a package installed without bytecode, where Python may not write it
(PYTHONDONTWRITEBYTECODE), stands for torch as uv installs it into a container image; a module beside it for the
command's own imports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from autotuner.base import bytecode, bytecode_fill

ROOT = Path(__file__).resolve().parents[2]
PACKAGE, MODULE = "bytecode_probe_pkg", "bytecode_probe_mod"

# A command: keep() (the probe package standing for torch, filled whole), then its own import.
COMMAND = f"""
import os, sys
from autotuner.base import bytecode
kept = bytecode.keep(({PACKAGE!r},), filled=({PACKAGE!r},), requires=None)
print("kept", kept)
print("prefix", os.environ.get("PYTHONPYCACHEPREFIX"))
print("writes", not sys.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ)
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
    assert path.exists(), f"the fill left no {path}"


def test_a_first_command_reads_the_standard_librarys_bytecode_copied_and_the_rest_as_its_fill_compiles_it(tmp_path):
    site = _install(tmp_path)
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    first = _command(tmp_path, site)
    tree = Path(first["stamp"]).parent
    # the first command reads and writes the tree at once: the standard library's bytecode copied there first
    assert first["kept"] == first["prefix"] == str(tree) and first["writes"] == "True", first
    assert tree.parent == folder and oct(folder.stat().st_mode & 0o777) == oct(0o700)
    json_init = next(Path(os.__file__).parent.glob(f"json/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"))
    assert (tree / str(json_init.parent.parent).lstrip(os.sep) / json_init.name).read_bytes() == json_init.read_bytes()
    _wait_for(Path(first["stamp"]))  # the fill, left running past the first command
    assert not (tree / bytecode.FILLING).exists()
    kept = {p.name.split(".")[0]: p for p in [*folder.rglob(f"{PACKAGE}/*.pyc"), *folder.rglob(f"{MODULE}.*.pyc")]}
    # the package whole (what it imports, and what nobody does), and the command's own import, which it wrote itself
    assert set(kept) == {MODULE, "__init__", "later", "lazy"}, sorted(folder.rglob("*"))
    assert not (site / PACKAGE / "__pycache__").exists() and not (site / "__pycache__").exists()  # never beside
    second = _command(tmp_path, site)
    assert second["kept"] == second["prefix"] == str(tree), second  # this installation's tree
    # a child as the fork server runs (-B, the prefix inherited): -v names the file each module's code came from
    child = subprocess.run([sys.executable, "-B", "-v", "-c", f"import {MODULE}, {PACKAGE}.lazy, json"],
                           env=_env(tmp_path, site, PYTHONPYCACHEPREFIX=second["prefix"]), capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    for name in kept:
        assert f"code object from '{kept[name]}'" in child.stderr, child.stderr[-3000:]
    assert f"code object from '{tree / str(json_init.parent.parent).lstrip(os.sep) / json_init.name}'" in child.stderr


def test_the_fill_compiles_what_has_no_bytecode_in_the_order_imports_need_it_and_copies_what_has(tmp_path):
    """A package whose bytecode is beside it (compiled when installed) keeps that bytecode in the tree; the files
    of a fill's packages come the shallowest first, so that the first stripe of every worker is a package's top."""
    site = _install(tmp_path)
    (site / PACKAGE / "deep").mkdir()
    (site / PACKAGE / "deep" / "__init__.py").write_text("")
    (site / PACKAGE / "tests").mkdir()  # never imported by a command
    (site / PACKAGE / "tests" / "test_it.py").write_text("")
    (site / "beside_pkg").mkdir()
    (site / "beside_pkg" / "__init__.py").write_text("BESIDE = 4\n")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(site / "beside_pkg")], check=True)
    files = bytecode_fill.walk(str(site / PACKAGE))
    order = bytecode_fill.ordered(files, [str(site)])
    assert [Path(p).relative_to(site).as_posix() for p in order] == [
        f"{PACKAGE}/__init__.py", f"{PACKAGE}/later.py", f"{PACKAGE}/lazy.py", f"{PACKAGE}/deep/__init__.py"]
    assert bytecode_fill.stripes(order, 3) == [[order[0], order[3]], [order[1]], [order[2]]]
    tree = tmp_path / "tree"
    for source in [*order, str(site / "beside_pkg" / "__init__.py")]:
        bytecode_fill.fill_one(str(tree), source)
    beside = next((site / "beside_pkg" / "__pycache__").glob("*.pyc"))
    kept = tree / str(site / "beside_pkg").lstrip(os.sep) / beside.name
    assert kept.read_bytes() == beside.read_bytes()
    lazy = tree / str(site / PACKAGE).lstrip(os.sep) / beside.name.replace("__init__", "lazy")
    assert lazy.exists() and not list(tree.rglob("*.pyc.*")) and not (site / PACKAGE / "__pycache__").exists()
    # Python reads them from there
    child = subprocess.run([sys.executable, "-B", "-v", "-c", f"import beside_pkg, {PACKAGE}.lazy"],
                           env=_env(tmp_path, site, PYTHONPYCACHEPREFIX=str(tree)), capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0 and f"code object from '{kept}'" in child.stderr and \
        f"code object from '{lazy}'" in child.stderr, child.stderr[-3000:]


def test_the_distributions_a_package_requires_are_filled_but_below_torchs(tmp_path):
    """A distribution's requirements, found on the command's path, but not those of the ones it names below."""
    site = tmp_path / "site"
    for name, requires in (("top", ["middle>=1", "torchlike", "optional; extra == 'x'"]), ("middle", []),
                           ("torchlike", ["hidden"]), ("hidden", []), ("optional", [])):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" +
                                       "".join(f"Requires-Dist: {r}\n" for r in requires))
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")
    found = bytecode_fill.required("top", [str(site)], {"torchlike"})
    assert sorted(Path(f).parent.name for f in found) == ["middle", "top", "torchlike"]


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
    time.sleep(2)  # (a fill, had one been started, would have written the little there is by now)
    assert refused["kept"] == "None" and list(folder.iterdir()) == [], sorted(folder.rglob("*"))
    folder.chmod(0o700)  # the user's own: a first command, which starts a fill
    _wait_for(Path(_command(tmp_path, bare)["stamp"]))


def test_a_fill_removes_the_trees_no_command_read_for_a_month(tmp_path):
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
    deadline = time.monotonic() + 60  # (the fill removes them after its stamp)
    while ((folder / "old").exists() or (folder / "unstamped").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in folder.iterdir()) == sorted(["recent", Path(first["stamp"]).parent.name])


def test_a_command_that_runs_the_users_script_leaves_their_python_as_they_set_it(tmp_path):
    """`autotuner run` and `install` run the user's script in their process: no prefix of autotuner's, and
    PYTHONDONTWRITEBYTECODE as the user set it; the other commands keep bytecode (here: `ops`)."""
    site = _install(tmp_path)
    script = tmp_path / "script.py"
    script.write_text("import os, sys\nprint('seen', os.environ.get('PYTHONPYCACHEPREFIX'), sys.pycache_prefix, "
                      "os.environ.get('PYTHONDONTWRITEBYTECODE'), sys.dont_write_bytecode)\n")
    cli = ("import sys\nfrom autotuner.base import bytecode\n"
           f"bytecode.keep.__defaults__ = (({PACKAGE!r},), ({PACKAGE!r},), None)\n"
           "from autotuner.cli import main\nsys.argv = ['autotuner', *sys.argv[1:]]\nmain()\n")
    folder = tmp_path / "cache" / "autotuner" / "pycache"
    for command in (["run", "--", str(script)], ["install", "--", str(script)]):
        done = subprocess.run([sys.executable, "-c", cli, *command], env=_env(tmp_path, site), cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "seen None None 1 True" in done.stdout, done.stdout
        assert not folder.exists()
    done = subprocess.run([sys.executable, "-c", cli, "ops"], env=_env(tmp_path, site), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _wait_for(next(folder.iterdir()) / bytecode.STAMP)


def test_a_fill_begun_lately_is_left_to_finish_and_one_that_died_is_begun_again(tmp_path):
    """The marker of a fill in progress: a command that finds a recent one starts no second fill (it reads and
    writes the tree meanwhile); one older than FILL_S stands for a fill that died, and the command starts another."""
    site = _install(tmp_path)
    where = subprocess.run([sys.executable, "-c", f"from autotuner.base import bytecode; "
                            f"print(bytecode.tree(({PACKAGE!r},)))"], env=_env(tmp_path, site), cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    tree = Path(where.stdout.strip())
    tree.mkdir(parents=True, mode=0o700)
    tree.parent.chmod(0o700)
    marker = tree / bytecode.FILLING
    marker.touch()
    first = _command(tmp_path, site)
    assert first["kept"] == str(tree)
    time.sleep(2)  # (a fill, had one been started, would have written the little there is by now)
    assert not (tree / bytecode.STAMP).exists()
    assert not list(tree.rglob(f"{PACKAGE}/lazy.*.pyc"))  # nobody imports it: only a fill writes it
    assert list(tree.rglob(f"{MODULE}.*.pyc"))  # the command's own import, written by the command
    died = time.time() - bytecode.FILL_S - 60
    os.utime(marker, (died, died))
    _wait_for(Path(_command(tmp_path, site)["stamp"]))
    assert list(tree.rglob(f"{PACKAGE}/lazy.*.pyc")) and not marker.exists()
