"""GPU tier: the device as `autotuner tune`'s own process sees it (from the driver, without torch) is the device
torch sees, and a tuning from that process imports no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from autotuner.base.device import current_device
from kernels._backend import cuda_properties
from tests.integration.test_tuning import NO_TORCH_SCRIPT

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: no CUDA device here"),
]


def test_the_driver_gives_the_properties_torch_gives():
    for index in range(torch.cuda.device_count()):
        props, driver = torch.cuda.get_device_properties(index), cuda_properties(index)
        assert driver.name == props.name and driver.capability == (props.major, props.minor)
        assert driver.sm_count == props.multi_processor_count and driver.total_memory == props.total_memory
        assert driver.smem_per_block == props.shared_memory_per_block_optin
        assert current_device(index).key == f"{props.name} (sm_{props.major}{props.minor})"


def test_a_tune_command_on_the_gpu_imports_no_torch_in_its_own_process(tmp_path):
    env = {**os.environ, "AUTOTUNER_LOCAL_WORKER": "0", "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'gpu.db'}"}
    out = subprocess.run([sys.executable, "-c", NO_TORCH_SCRIPT, "matmul", "--M", "512", "--N", "512", "--K", "512",
                          "--trials", "8", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert len(result["trials"]) == 8 and result["best_ms"] > 0 and result["torch_ms"] > 0
    assert result["device"] == current_device(0).key
    assert "torch imported: False" in out.stderr, out.stderr
