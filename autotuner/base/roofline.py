"""Datasheet roofline ceilings per device (dense 16-bit matrix rate, memory bandwidth): leads, not measurements. A
time's fraction is the larger of its compute and memory fractions; the interpreter has none."""

from __future__ import annotations

from dataclasses import dataclass

from autotuner.base.device import DeviceInfo


@dataclass(frozen=True)
class Ceilings:
    tflops_16bit: float
    tflops_fp32: float
    bandwidth_gbs: float
    source: str


DATASHEET = {
    "H200": Ceilings(989.0, 67.0, 4800.0, "datasheet"),
    "H100": Ceilings(989.0, 67.0, 3350.0, "datasheet"),
    "A100": Ceilings(312.0, 19.5, 2039.0, "datasheet"),
}


def ceilings(device: DeviceInfo) -> Ceilings | None:
    for name, c in DATASHEET.items():
        if name in device.name:
            return c
    return None


def fraction(device: DeviceInfo, flops: float, nbytes: float, ms: float, dtype: str) -> float | None:
    c = ceilings(device)
    if c is None or ms <= 0:
        return None
    peak = c.tflops_fp32 if dtype == "float32" else c.tflops_16bit
    floor_s = max(flops / (peak * 1e12), nbytes / (c.bandwidth_gbs * 1e9))
    return floor_s / (ms * 1e-3)
