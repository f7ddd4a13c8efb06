"""The import graph, read from the source (every `import`, at module level or inside a function): no circles,
and each floor imports only from the floors below it.

    kernels/, search_spaces/   the ground floor: Triton kernels; spaces and the kernel contract (over kernels)
    db/                        SQL: models, engine, repository, queue
    autotuner/                 the engine (autotuner/cli/ excepted)
    api/, autotuner/cli/       the service, and the command line (which starts the service)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "search_spaces", "db", "autotuner", "api")
FLOOR = {"kernels": 0, "search_spaces": 0, "db": 1, "autotuner": 2, "api": 3, "autotuner.cli": 3}


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
    return "autotuner.cli" if module.startswith(("autotuner.cli", "autotuner.__main__")) else module.split(".")[0]


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


def test_the_graph_is_read():
    graph = _graph()
    assert "autotuner.tuner" in graph and "search_spaces.contract" in graph["search_spaces.softmax"]
    assert "autotuner.lookup" in graph["autotuner.library"]  # an import inside a function counts too


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_each_floor_imports_only_from_the_floors_below():
    wrong = [f"{m} imports {t}" for m, targets in _graph().items() for t in targets
             if _floor(t) > _floor(m) or (_floor(t) == _floor(m) and _part(t) != _part(m)
                                          and (_part(m), _part(t)) not in SIDEWAYS)]
    assert wrong == []


def test_a_circle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
