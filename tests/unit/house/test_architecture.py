"""The import graph, read from the source (every `import`, at module level or inside a function): no circles,
and each room imports only from the floors below it (and, within a floor, only where SIDEWAYS allows).

    floor 0  kernels/, search_spaces/       Triton kernels; spaces and the kernel contract (over kernels)
    floor 1  db/                            SQL: models, engine, repository, queue, migrations
    floor 2  autotuner.base                 the device, the ops by name, the settings
    floor 3  autotuner.store                the engine's view of the database, behind small interfaces
    floor 4  autotuner.launch               lookups, library calls, kept binaries and specializations
             autotuner.engine, in its rooms:
      4.1    autotuner.engine.measure       how a config is timed: measurers, trial processes, compiles, timing
      4.2    autotuner.engine.search        what to try: the search contract, each strategy, the loop, replay
      4.3    autotuner.engine               the tuner over them, what a run reports, whether a problem fits
      4.4    autotuner.engine.sweeps        problems differing in one dimension: sweep, cross-time, refine, predict
    floor 5  autotuner.decorator            autotuner.autotune (tunes in process: engine and launch both)
             autotuner.worker               the job loop (engine over the store)
             autotuner.analysis             bench, peaks, report
    floor 6  api/, autotuner.cli            the service, and the command line (which starts the service)
    floor 7  autotuner                      the package's public names (lazily: softmax, autotune ...)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("kernels", "search_spaces", "db", "autotuner", "api")
FLOOR = {"kernels": 0, "search_spaces": 0, "db": 1, "autotuner.base": 2, "autotuner.store": 3,
         "autotuner.launch": 4, "autotuner.engine.measure": 4.1, "autotuner.engine.search": 4.2,
         "autotuner.engine": 4.3, "autotuner.engine.sweeps": 4.4,
         "autotuner.decorator": 5, "autotuner.worker": 5, "autotuner.analysis": 5,
         "api": 6, "autotuner.cli": 6, "autotuner": 7}
ROOMS = tuple(sorted((r for r in FLOOR if r.startswith("autotuner.")), key=len, reverse=True))


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in modules:  # `from x import name`: the module is x unless name is a submodule
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


SIDEWAYS = {("search_spaces", "kernels"), ("autotuner.cli", "api")}  # allowed within a floor: spaces declare ops
# over kernels; the command line starts the service


def _part(module: str) -> str:
    """The room a module lives in: a sub-package of autotuner, or a top-level package."""
    if module == "autotuner.__main__":
        return "autotuner.cli"
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), module.split(".")[0])


def _floor(module: str) -> int:
    return FLOOR[_part(module)]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_product_module_is_over_400_lines_nor_a_class_over_300():
    long = {str(p.relative_to(ROOT)): n for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
    classes = {f"{p.relative_to(ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
               for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.ClassDef) and node.end_lineno is not None
               and node.end_lineno - node.lineno + 1 > 300}
    assert classes == {}


def test_the_graph_is_read():
    graph = _graph()
    assert "autotuner.engine.tuner" in graph and "search_spaces.contract" in graph["search_spaces.softmax"]
    assert "autotuner.launch.lookup" in graph["autotuner.launch.library"]  # an import inside a function counts too
    assert _part("autotuner.engine.sweeps.sweep") == "autotuner.engine.sweeps"
    assert _part("autotuner.engine.tuner") == "autotuner.engine" and _part("autotuner.__main__") == "autotuner.cli"


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_every_module_lives_in_a_room():
    """autotuner/ holds rooms, not loose modules: only the package's public names and `__main__` sit at its top."""
    loose = [m for m in _graph() if m.startswith("autotuner.") and _part(m) == "autotuner" and m != "autotuner"]
    assert loose == []
    rooms = {p.name for p in (ROOT / "autotuner").iterdir() if (p / "__init__.py").exists()}
    engine_rooms = {p.name for p in (ROOT / "autotuner/engine").iterdir() if (p / "__init__.py").exists()}
    assert {f"autotuner.{r}" for r in rooms} | {f"autotuner.engine.{r}" for r in engine_rooms} == set(ROOMS)


def test_each_room_says_what_it_owns_and_may_import():
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((ROOT / room.replace(".", "/") / "__init__.py").read_text())) or ""
        assert "May import" in doc, room


def test_each_floor_imports_only_from_the_floors_below():
    wrong = [f"{m} imports {t}" for m, targets in _graph().items() for t in targets
             if _floor(t) > _floor(m) or (_floor(t) == _floor(m) and _part(t) != _part(m)
                                          and (_part(m), _part(t)) not in SIDEWAYS)]
    assert wrong == []


def test_the_engine_and_the_launch_path_reach_the_store_through_its_interfaces():
    """The search and the lookups are written against autotuner.store.interfaces (and the frozen rows and judged
    results and sweep predictions it speaks in, what a sweep measured and the resolution steps, read through those
    interfaces), never a
    store class: any store that answers the interface will do. Nor does anything the engine may import reach a
    store class."""
    allowed = {"autotuner.store.interfaces", "autotuner.store.rows", "autotuner.store.stored_best",
               "autotuner.store.prediction", "autotuner.store.regret", "autotuner.store.resolution",
               "autotuner.store.compiled_files"}
    graph = _graph()
    wrong = [f"{m} imports {t}" for m, targets in graph.items() if _part(m).startswith("autotuner.engine")
             for t in targets if _part(t) == "autotuner.store" and t not in allowed]
    assert wrong == []
    reached, todo = set(), list(allowed)
    while todo:
        m = todo.pop()
        if m not in reached:
            reached.add(m)
            todo += [t for t in graph[m] if _part(t) == "autotuner.store"]
    assert not reached & {"autotuner.store.database", "autotuner.store.sql_runs", "autotuner.store.sql_jobs",
                           "autotuner.store.lazy", "autotuner.store.job_store"}, reached
    launch = {t for m, targets in graph.items() if _part(m) == "autotuner.launch" for t in targets
              if _part(t) == "autotuner.store"}
    assert "autotuner.store.interfaces" in launch


def test_a_circle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


STORE_CLASSES = {"Store", "LaunchReads", "LazyStore", "JobStore", "SqliteReads"}


def _store_class_uses(paths: list[Path]) -> list[str]:
    """In these files: each `isinstance(x, <a store class>)`, and each `Store(...)` made directly (a database is
    opened with autotuner.store.open_store)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name == "isinstance" and len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                if any(isinstance(k, ast.Name) and k.id in STORE_CLASSES for k in kinds):
                    found.append(f"{path.name}:{node.lineno} isinstance on a store class")
            elif name == "Store":
                found.append(f"{path.name}:{node.lineno} Store(...) made directly")
    return found


def test_outside_the_store_no_code_asks_which_store_class_answers():
    """Every room reads the store's interfaces: none asks which class answers (`isinstance` on a store class), and
    none opens a database but through `open_store`, so a new backend is the store package's business."""
    outside = [p for pkg in ("autotuner", "api") for p in (ROOT / pkg).rglob("*.py")
               if _part(_module(p)) != "autotuner.store"]
    assert len(outside) > 50
    assert _store_class_uses(outside) == []


def test_outside_the_store_nothing_imports_a_store_class():
    """Every room is written against autotuner.store.interfaces (`Storage` for the whole store, narrower ones where
    less is used): none imports the SQL implementation, for a type or an error, so a second backend changes the
    store package alone."""
    graph = _graph()
    wrong = [f"{m} imports {t}" for m, targets in graph.items() if _part(m) != "autotuner.store"
             for t in targets if t in ("autotuner.store.database", "autotuner.store.sql_runs", "autotuner.store.sql_jobs")]
    assert wrong == []


def test_a_store_class_asked_for_would_be_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(s):\n    return isinstance(s, (int, LaunchReads)) or Store('sqlite://')\n")
    assert _store_class_uses([probe]) == ["probe.py:2 isinstance on a store class", "probe.py:2 Store(...) made directly"]


def _raw_setting_reads(paths: list[Path]) -> list[str]:
    """Each read of an AUTOTUNER_* variable straight from the environment (`os.environ.get("AUTOTUNER_X")`,
    `os.environ["AUTOTUNER_X"]` read, `os.getenv("AUTOTUNER_X")`)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getenv") \
                    and node.args and isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            if isinstance(key, str) and key.startswith("AUTOTUNER_"):
                found.append(f"{path}:{node.lineno} {key}")
    return found


def test_autotuner_variables_are_read_by_the_settings_or_the_one_environment_reader():
    """Every AUTOTUNER_* variable is read through autotuner.base.settings, or before the settings exist through
    kernels._environment, with the same rules for a flag; none straight from os.environ, each with rules of its
    own."""
    product = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
               if p.name != "_environment.py" and p.parent.name != "migrations"]
    assert len(product) > 100
    assert _raw_setting_reads(product) == []


def test_a_raw_setting_read_would_be_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\na = os.environ.get('AUTOTUNER_X')\nb = os.environ['AUTOTUNER_Y']\n"
                     "c = os.getenv('AUTOTUNER_Z')\nos.environ['AUTOTUNER_W'] = '1'\n")
    assert [r.rsplit(" ", 1)[1] for r in _raw_setting_reads([probe])] == ["AUTOTUNER_X", "AUTOTUNER_Y", "AUTOTUNER_Z"]


def test_a_flag_means_what_it_means_to_the_settings(monkeypatch):
    from pydantic import TypeAdapter, ValidationError

    from kernels._environment import env_flag

    as_settings = TypeAdapter(bool)
    for text in ("1", "true", "True", "YES", "on", "t", "y", "0", "false", "No", "OFF", "f", "n", " 1 "):
        monkeypatch.setenv("AUTOTUNER_PROBE", text)
        assert env_flag("AUTOTUNER_PROBE") is as_settings.validate_python(text.strip()), text
    for text, default in (("", True), ("", False), ("maybe", True), ("2", False)):
        monkeypatch.setenv("AUTOTUNER_PROBE", text)
        if text:
            with pytest.raises(ValidationError):
                as_settings.validate_python(text)
        assert env_flag("AUTOTUNER_PROBE", default) is default, text


# Outside the store only the migration command reaches the database layer itself (compiled files go through
# autotuner.store.compiled_files).
DB_OUTSIDE_THE_STORE = {"autotuner.cli.database"}


def test_only_the_store_imports_the_database_layer():
    """Every room names the store's errors and states through autotuner.store (autotuner.store.errors), so a second
    backend, or a change of the SQL layer, is the store's business."""
    graph = _graph()
    wrong = sorted(f"{m} imports {t}" for m, targets in graph.items()
                   if _part(m) in ("api",) or (m.startswith("autotuner") and _part(m) != "autotuner.store")
                   for t in targets if t == "db" or t.startswith("db.")
                   if m not in DB_OUTSIDE_THE_STORE)
    assert wrong == []


# Exceptions that are not autotuner's to root: a worker's JobLost and StopWorker interrupt a job as Ctrl-C would
# (KeyboardInterrupts, which `except Exception` must not catch).
NOT_ROOTED = {"autotuner.store.job_store.JobLost", "autotuner.worker.job_endings.StopWorker"}


def test_every_exception_the_project_defines_derives_from_autotuner_error():
    """One root (`autotuner.AutotunerError`): a caller catches everything autotuner raises at once, and each class
    keeps the builtin it always derived from."""
    import importlib
    import inspect

    import autotuner
    from search_spaces.errors import AutotunerError

    assert autotuner.AutotunerError is AutotunerError
    found, unrooted = [], []
    for module in sorted(_graph()):
        if module.endswith("__main__") or ".migrations." in module:
            continue
        mod = importlib.import_module(module)
        for name, cls in vars(mod).items():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module:
                found.append(f"{module}.{name}")
                if not issubclass(cls, AutotunerError) and f"{module}.{name}" not in NOT_ROOTED:
                    unrooted.append(f"{module}.{name}")
    assert len(found) > 20
    assert unrooted == []
    from search_spaces.problem import ProblemError

    assert issubclass(ProblemError, ValueError)  # what it always was, too


def test_a_row_is_declared_once_and_its_export_import_and_http_models_follow_it():
    """The store's frozen rows (autotuner.store.rows) declare each row; the export's fields, the import's models
    and the service's responses are derived from them, so a field added to a row reaches all three."""
    import dataclasses

    from api import schemas
    from autotuner.store import rows, transfer

    for row, exported, imported, shown, left_out in (
            (rows.TrialRow, transfer.TRIAL_FIELDS, transfer.TrialRow, schemas.TrialOut, {"run_id", "config_key",
                                                                                          "created_at"}),
            (rows.DeviceRow, transfer.DEVICE_FIELDS, transfer.DeviceRow, schemas.DeviceOut, set()),
            (rows.ResultRow, transfer.BEST_FIELDS, transfer.BestRow, schemas.ResultOut, set())):
        assert set(exported) <= set(rows.row_fields(row)) and set(exported) <= set(imported.model_fields)
        assert set(rows.row_fields(row, exclude=left_out)) <= set(shown.model_fields)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Grown(rows.TrialRow):
        flops: float | None = None

    assert "flops" in schemas.from_row(Grown, "GrownOut").model_fields
    assert rows.row_fields(Grown)[-1] == "flops"
