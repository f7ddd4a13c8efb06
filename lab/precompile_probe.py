"""Probe (GPU host): can a host's first command compile torch's bytecode in parallel before it imports torch?

Prints: where the interpreter's, torch's and the wheels' bytecode is; what `import torch, triton, triton.language`
imports and from where; the wall time of compiling whole package folders on every core into a prefix folder (and
of copying the standard library's bytecode there); then import times with and without that prefix.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

IMPORT = "import time; t = time.perf_counter(); import torch, triton, triton.language; " \
         "print(json.dumps({'s': time.perf_counter() - t}))"
CLOSURE = ("import json, sys, torch, triton, triton.language\n"
           "import autotuner.cli.app\n"
           "print(json.dumps(sorted(f for m in list(sys.modules.values()) if isinstance(f := getattr(m, '__file__', None), str) and f.endswith('.py') and f.startswith('/'))))")
WORKER = ("import json, os, py_compile, sys\n"
          "for path in json.load(sys.stdin):\n"
          "    try:\n"
          "        py_compile.compile(path, quiet=2)\n"
          "    except Exception:\n"
          "        pass\n")


def beside(path: str) -> bool:
    return os.path.exists(importlib.util.cache_from_source(path))


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    cores = len(os.sched_getaffinity(0))
    stdlib = sysconfig.get_paths()["stdlib"]
    print("python", sys.version.split()[0], sys.executable, "stdlib", stdlib, "cores", cores,
          "PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    closure = json.loads(subprocess.run([sys.executable, "-c", "import json\n" + CLOSURE], capture_output=True,
                                        text=True, env=env, check=True).stdout)
    groups: dict[str, list[int]] = {}
    for f in closure:
        key = "stdlib" if f.startswith(stdlib) and "-packages" not in f else \
            (f.split("-packages/")[1].split("/")[0] if "-packages/" in f else "other:" + f.split("/")[-2])
        g = groups.setdefault(key, [0, 0])
        g[0] += 1
        g[1] += beside(f)
    print("closure of import torch, triton, autotuner.cli.app:", len(closure), "modules")
    for key, (n, b) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {key:40s} {n:5d} modules, {b:5d} with bytecode beside")
    roots = []
    for name in ("torch", "triton", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin:
            roots.append(os.path.dirname(spec.origin))
    files = [os.path.join(r, f) for root in roots for r, _, fs in os.walk(root) for f in fs if f.endswith(".py")]
    print("whole folders:", roots, len(files), "files")
    rows = []
    for workers in (cores - 1, max(1, cores // 2)):
        prefix = tempfile.mkdtemp(prefix="pyc")
        t = time.perf_counter()
        copied = 0
        for r, dirs, fs in os.walk(stdlib):
            dirs[:] = [d for d in dirs if d not in ("test", "idlelib", "tkinter", "turtledemo", "site-packages",
                                                    "dist-packages", "__pycache__", "ensurepip", "lib2to3")]
            for f in fs:
                if f.endswith(".py"):
                    src = os.path.join(r, f)
                    pyc = importlib.util.cache_from_source(src)
                    if os.path.exists(pyc):
                        dst = prefix + os.path.join(r, f[:-3] + "." + sys.implementation.cache_tag + ".pyc")
                        os.makedirs(os.path.dirname(dst), exist_ok=True)
                        shutil.copyfile(pyc, dst)
                        copied += 1
        t_copy = time.perf_counter() - t
        t = time.perf_counter()
        chunks = [files[i::workers] for i in range(workers)]
        procs = []
        for chunk in chunks:
            p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                 env={**env, "PYTHONPYCACHEPREFIX": prefix})
            p.stdin.write(json.dumps(chunk).encode())
            p.stdin.close()
            procs.append(p)
        for p in procs:
            p.wait()
        t_compile = time.perf_counter() - t
        imports = []
        for _ in range(3):
            r = subprocess.run([sys.executable, "-c", "import json\n" + IMPORT], capture_output=True, text=True,
                               env={**env, "PYTHONPYCACHEPREFIX": prefix})
            imports.append(json.loads(r.stdout)["s"] if r.returncode == 0 else float("nan"))
        verbose = subprocess.run([sys.executable, "-v", "-c", "import json\n" + IMPORT], capture_output=True,
                                 text=True, env={**env, "PYTHONPYCACHEPREFIX": prefix}).stderr
        from_source = [line for line in verbose.splitlines() if line.startswith("# code object from") and
                       line.rstrip("'").endswith(".py")]
        rows.append((workers, copied, t_copy, len(files), t_compile, imports, len(from_source)))
        (out / f"from_source_{workers}.txt").write_text("\n".join(from_source))
        shutil.rmtree(prefix)
    plain = []
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", "import json\n" + IMPORT], capture_output=True, text=True, env=env)
        plain.append(json.loads(r.stdout)["s"] if r.returncode == 0 else float("nan"))
    print("| workers | stdlib pyc copied | copy s | files compiled | compile wall s | import after (3) | compiled from source on import |")
    for w, c, tc, n, tcomp, imp, fs in rows:
        print(f"| {w} | {c} | {tc:.2f} | {n} | {tcomp:.2f} | {' / '.join(f'{x:.2f}' for x in imp)} | {fs} |")
    print("import without a prefix (3):", " / ".join(f"{x:.2f}" for x in plain))


if __name__ == "__main__":
    main()
