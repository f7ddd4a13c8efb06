"""What decides a Triton compile's output, hashed without hashing Triton's installation: Triton's version and a stat of
its library, the target, `src.hash()`, the options and the `TRITON_*` environment but the cache locations. For the kept
binaries and the host-wide compile lock."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

VERSION = "2"  # of the key's make-up (the kept binaries are stored under it)
_UNKEYED_ENV = {"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TRITON_CACHE_MANAGER",
                "TRITON_PRINT_AUTOTUNING", "TRITON_INTERPRET"}
_fingerprint: str | None = None


def triton_fingerprint() -> str:
    """Triton's version and the size and mtime of the files its cache key hashes: a stat, not a read."""
    global _fingerprint
    if _fingerprint is None:
        import sysconfig

        import triton

        root = Path(triton.__file__).parent
        ext = (sysconfig.get_config_var("EXT_SUFFIX") or ".so").split(".")[-1]
        parts = [triton.__version__]
        for rel in (f"_C/libtriton.{ext}", "__init__.py", "compiler/compiler.py", "compiler/code_generator.py",
                    "runtime/jit.py", "backends/nvidia/compiler.py", "backends/nvidia/bin/ptxas",
                    "backends/amd/compiler.py"):
            try:
                st = (root / rel).stat()
                parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append(f"{rel}:-")
        _fingerprint = "|".join(parts)
    return _fingerprint


def compile_key(src: Any, target: Any, options: dict[str, Any] | None) -> str:
    from triton._C.libtriton import get_cache_invalidating_env_vars

    env = sorted({**{k: v for k, v in os.environ.items() if k.startswith("TRITON_") and k not in _UNKEYED_ENV},
                  **get_cache_invalidating_env_vars()}.items())
    text = json.dumps([VERSION, triton_fingerprint(), repr(target), src.hash(),
                       sorted((k, repr(v)) for k, v in (options or {}).items()), env])
    return hashlib.sha256(text.encode()).hexdigest()
