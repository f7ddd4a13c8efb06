"""A CUDA driver and NVML standing in for the real ones (this machine and CI have none), built with the system's C
compiler into a folder that a child process then loads first (LD_LIBRARY_PATH): the driver finds
STANDIN_DEVICES devices (default 1) and writes the id of each process that initialises it (`cuInit`) to the file
CUINIT_LOG; NVML finds as many and initialises nothing of CUDA's, or fails to start (a host whose NVML cannot say,
which leaves the driver to be asked even where a real NVML is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

_COUNT = r"""
#include <stdlib.h>
static int devices(void) { const char *n = getenv("STANDIN_DEVICES"); return n ? atoi(n) : 1; }
"""
DRIVER = _COUNT + r"""
#include <stdio.h>
#include <unistd.h>
int cuInit(unsigned int flags) {
    FILE *log = fopen(getenv("CUINIT_LOG"), "a");
    if (log) { fprintf(log, "%d\n", (int)getpid()); fclose(log); }
    return 0;
}
int cuDeviceGetCount(int *count) { *count = devices(); return 0; }
"""
NVML = _COUNT + r"""
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = (unsigned int)devices(); return 0; }
int nvmlShutdown(void) { return 0; }
"""
NVML_FAILING = "int nvmlInit_v2(void) { return 9; }  /* NVML_ERROR_DRIVER_NOT_LOADED */\n"


def build(folder: Path, nvml: bool = True) -> dict[str, str]:
    """Build the stand-in driver and NVML (one that fails to start, where not `nvml`) into `folder`; the environment
    a child needs to load them and log to folder/cuinit.log."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "building the stand-in CUDA driver needs a C compiler (cc)"
    for name, source in (("libcuda.so.1", DRIVER), ("libnvidia-ml.so.1", NVML if nvml else NVML_FAILING)):
        (folder / f"{name}.c").write_text(source)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / name), str(folder / f"{name}.c")], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")}
    env.update(LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(folder), env.get("LD_LIBRARY_PATH")])),
               CUINIT_LOG=str(folder / "cuinit.log"))
    return env


def initialised(folder: Path) -> list[str]:
    """The ids of the processes that called the stand-in's cuInit."""
    log = folder / "cuinit.log"
    return log.read_text().split() if log.exists() else []
