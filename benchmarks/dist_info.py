"""Write autotuner's metadata into a folder as an install leaves it, without its packages (benchmarks/gpu_session.sh:
the GPU host runs the source tree from PYTHONPATH, and a command's bytecode fill reads the requirements an install
names; autotuner.base.bytecode).

    python benchmarks/dist_info.py /tmp/site
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib


def main() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    info = Path(sys.argv[1]) / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in project["dependencies"]))
    (info / "RECORD").write_text("")
    print(info)


if __name__ == "__main__":
    main()
