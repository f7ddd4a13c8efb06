"""How deeply a JSON text nests, found before it is parsed: Python's parser (and what validates its result)
recurses once per level, so a text nested 100,000 deep ends in a RecursionError, not a clear refusal."""

from __future__ import annotations

import re

MAX_DEPTH = 32  # deeper than any file or body this project writes or reads (an export: 5 levels)
# a string, as "unrolled" runs of plain characters between escapes: Python's regular expressions keep a backtracking
# entry for every repetition of an alternation, so `"(?:[^"\\]|\\.)*"` took about 120 bytes per byte of a long string
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def too_deep(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON in `text` nests arrays and objects more than `limit` deep (strings' contents ignored)."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub(b'""', raw)):
        if m.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def nesting(data: object) -> int:
    """How deeply parsed JSON nests its arrays and objects, found without recursion (a file's parse: a text too large
    for `too_deep`'s copy, the parser's own RecursionError caught for what nests past the interpreter's limit)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest
