"""GPUs as their drivers describe them, for the tests that decide what fits a device without having one."""

from __future__ import annotations

from autotuner.base.device import DeviceInfo

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", (9, 0), 132, 80 << 30, 232448, "cuda:0")
A100 = DeviceInfo("NVIDIA A100-SXM4-80GB", (8, 0), 108, 80 << 30, 166912, "cuda:0")
