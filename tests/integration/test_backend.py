"""How kernels/_backend counts the CUDA devices when `autotuner` is imported before torch: through NVML, as torch
does, reading CUDA_VISIBLE_DEVICES as the CUDA runtime does, and never initialising CUDA in the importing process
(whose forked children could not initialise it then); with a stand-in driver and NVML (tests/support/stand_in_cuda.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import stand_in_cuda

COUNT = ("import os, sys, autotuner\n"
         "from kernels._backend import cuda_device_count\n"
         "print(os.getpid(), cuda_device_count(), os.environ.get('TRITON_INTERPRET', '-'), 'torch' in sys.modules)\n")


def count(env: dict[str, str], visible: str | None) -> tuple[str, int, str, str]:
    env = dict(env, STANDIN_DEVICES="2")
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    out = subprocess.run([sys.executable, "-c", COUNT], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    pid, n, interpret, torch = out.stdout.split()[-4:]
    assert torch == "False"  # (the point of asking NVML or the driver: no torch imported)
    return pid, int(n), interpret, torch


@pytest.mark.parametrize(("visible", "expected"), [
    (None, 2), ("1", 1), ("0,1", 2), ("1,0", 2), ("0,7,1", 1), ("1gpu,0", 2), ("", 0), ("-1", 0), ("0,-1,1", 1),
    ("1,0,1", 0), ("0,5,0", 0),
])
def test_importing_autotuner_counts_the_visible_gpus_without_initialising_cuda(tmp_path, visible, expected):
    env = stand_in_cuda.build(tmp_path)
    pid, n, interpret, _ = count(env, visible)
    assert n == expected
    assert interpret == ("1" if expected == 0 else "-")  # no GPU left: the interpreter is chosen
    assert stand_in_cuda.initialised(tmp_path) == [], "importing autotuner initialised CUDA"


def test_where_nvml_cannot_say_the_driver_is_asked(tmp_path):
    """A list of UUIDs only the driver can match, or an NVML that does not start: the driver counts (and is
    initialised, as before NVML was asked)."""
    env = stand_in_cuda.build(tmp_path)
    pid, n, _, _ = count(env, "GPU-0d6a4f3c")
    assert n == 2 and set(stand_in_cuda.initialised(tmp_path)) == {pid}
    failing = tmp_path / "failing"
    failing.mkdir()
    pid, n, _, _ = count(stand_in_cuda.build(failing, nvml=False), "1")
    assert n == 2 and set(stand_in_cuda.initialised(failing)) == {pid}  # (the stand-in driver ignores the variable)
