"""A Triton kernel function's identity, for its results' `kernel_hash`: what decides its binary, as Triton's cache key
reads it, and nothing else. More: docs/design/kernels.md."""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import textwrap
from types import ModuleType
from typing import Any

_DEF = re.compile(r"^def\s+\w+\s*\(", re.MULTILINE)
_CONSTANTS = (int, float, bool, str)
_PARSE_TRIES = 3


def python_function(value: Any) -> Any:
    """The Python function under a JIT function (Triton's JITFunction, the interpreter's, or a wrapper such as
    triton.heuristics or an Autotuner), or None for anything else."""
    seen = 0
    while not inspect.isfunction(value):
        if not hasattr(value, "fn") or not hasattr(value, "arg_names") or seen > 8:
            return None
        value, seen = value.fn, seen + 1
    return value if seen else None


def kernel_identity(fn: Any) -> str:
    """The kernel's identity: a hex digest (see the module's text). `fn` is the Python function or what wraps it."""
    h = hashlib.sha256()
    _visit(python_function(fn) or fn, h, set())
    return h.hexdigest()


def module_identity(*modules: ModuleType) -> str:
    """What in these modules decides a built-in op's binaries and launches, as a hex digest: each JIT function's
    identity (callees followed) with its decorators, each other top-level definition's source without docstring, each
    top-level constant, by name. Docstrings, imports, comments and which module holds a definition leave it unchanged.
    """
    parts: dict[str, str] = {}
    for module in modules:
        try:
            src = inspect.getsource(module)
        except (OSError, TypeError):  # no source on disk: its name stands for it
            parts[module.__name__] = module.__name__
            continue
        segment, tree = _segments(src), _parse(src)
        for node in tree.body if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                decorators = "".join(f"@{segment(d)}\n" for d in node.decorator_list)
                value = getattr(module, node.name, None)
                if python_function(value) is not None:
                    parts[node.name] = decorators + kernel_identity(value)
                else:
                    text = segment(node)
                    doc = node.body[0] if node.body and isinstance(node.body[0], ast.Expr) and \
                        isinstance(getattr(node.body[0], "value", None), ast.Constant) else None
                    if doc is not None:
                        text = text.replace(segment(doc), "", 1)
                    parts[node.name] = decorators + text
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                text = segment(node)
                parts[text.split("=", 1)[0].strip()] = text
    h = hashlib.sha256()
    for name in sorted(parts):
        h.update(f"\0{name}\0{parts[name]}".encode())
    return h.hexdigest()


def _segments(src: str) -> Any:
    """`ast.get_source_segment` for one source, its lines split once (the function splits the whole text on every
    call): a node's exact text from its first to its last character."""
    lines = [line.encode() for line in re.findall(r"[^\r\n]*(?:\r\n|\n|\r|$)", src)]

    def segment(node: ast.AST) -> str:
        first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined, operator]
        start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        if first == last:
            return lines[first][start:end].decode()
        return b"".join([lines[first][start:], *lines[first + 1:last], lines[last][:end]]).decode()

    return segment


_SOURCES: dict[Any, str] = {}  # by function: a module's kernels share helpers, each read and parsed once


def _source(func: Any) -> str:
    try:
        return _SOURCES[func]
    except (KeyError, TypeError):  # (TypeError: an object that cannot be a key)
        pass
    try:
        src = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):  # no source on disk (defined in a REPL): its name stands for it
        return str(getattr(func, "__qualname__", repr(func)))
    match = _DEF.search(src)
    src = src[match.start():] if match else src
    try:
        _SOURCES[func] = src
    except TypeError:
        pass
    return src


def _visit(func: Any, h: Any, seen: set[int]) -> None:
    if id(func) in seen:
        return
    seen.add(id(func))
    src = _source(func)
    h.update(src.encode())
    tree = _parse(src)
    if tree is None:
        return
    scope = {**getattr(func, "__globals__", {}), **_nonlocals(func)}
    local = _locals(tree)
    for path in sorted(_names(tree)):
        if path[0] in local:  # a parameter or a local: its value is the call's, not the binary's
            continue
        value = _resolve(scope, path)
        callee = python_function(value)
        if callee is not None:
            h.update(f"\0call {'.'.join(path)}\0".encode())
            _visit(callee, h, seen)
            continue
        constant = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
        if isinstance(constant, _CONSTANTS):
            h.update(f"\0{'.'.join(path)}={constant!r}\0".encode())


def _parse(src: str) -> ast.Module | None:
    """The source's syntax tree, or None where it does not parse. CPython 3.11 keeps one AST recursion counter for
    all threads, so an `ast.parse` in another thread at the same moment (Triton compiling, a user's code) can fail
    this one with a SystemError that a second try does not meet (python/cpython#106905): tried up to three times."""
    for attempt in range(_PARSE_TRIES):
        try:
            return ast.parse(src)
        except SyntaxError:
            return None
        except SystemError:
            if attempt == _PARSE_TRIES - 1:
                raise
    return None


def _nonlocals(func: Any) -> dict[str, Any]:
    try:
        return dict(inspect.getclosurevars(func).nonlocals)
    except (TypeError, ValueError):
        return {}


def _names(tree: ast.AST) -> set[tuple[str, ...]]:
    """Every name the function reads, and every dotted path read from one (`helpers.fn`, `tl.float32`)."""
    out: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            path = (node.id, *reversed(parts))
            out.update(path[:i] for i in range(1, len(path) + 1))
    return out


def _locals(tree: ast.AST) -> set[str]:
    """The names the function binds itself: its parameters and every name it assigns (as Triton's dependency
    finder skips them). A global that shares such a name is not read by the kernel, whatever its value."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _resolve(scope: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value a dotted path names, followed through modules only (an argument's attribute is not looked up)."""
    value = scope.get(path[0])
    for part in path[1:]:
        if not isinstance(value, ModuleType):
            return None
        value = getattr(value, part, None)
    return value
