"""The device's measured ceilings, for roofline fractions: copy bandwidth (`dst.copy_(src)` of 1 GiB) and cuBLAS's dense
matmul rate per dtype (the faster of 4096^3 and 8192^3; float32 with TF32, as `tl.dot` uses it), stored per device in
`device_peaks`. A kernel's fraction is max(flops / rate, bytes / bandwidth) over its time."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from autotuner.base.device import DeviceInfo
from autotuner.engine.measure.timing import time_cuda
from autotuner.store.interfaces import PeakStore
from search_spaces.problem import torch_dtype_of

COPY = "copy_bandwidth"
DTYPES = ("float16", "bfloat16", "float32")
COPY_BYTES = 1 << 30
MATMUL_SIZES = (4096, 8192)  # the faster of the two: long runs at 8192 can be held back by power limits


@dataclass(frozen=True)
class Peaks:
    copy_gbs: float
    matmul_tflops: dict[str, float]

    def floor_ms(self, flops: float, nbytes: float, dtype: str) -> float:
        compute = flops / (self.matmul_tflops.get(dtype, 0.0) * 1e12) if self.matmul_tflops.get(dtype) else 0.0
        return max(compute, nbytes / (self.copy_gbs * 1e9)) * 1e3

    def fraction(self, flops: float, nbytes: float, dtype: str, ms: float) -> float:
        return self.floor_ms(flops, nbytes, dtype) / ms


def matmul_name(dtype: str) -> str:
    return f"matmul_{dtype}"


def measure_copy(device: DeviceInfo) -> float:
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device.torch_device).uniform_()
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), warmup_ms=50, rep_ms=300)
    return 2 * COPY_BYTES / (t.median_ms * 1e-3) / 1e9


def measure_matmul(device: DeviceInfo, dtype: str) -> float:
    torch_dtype = torch_dtype_of(dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    rates = []
    try:
        for n in MATMUL_SIZES:
            a = torch.randn(n, n, device=device.torch_device, dtype=torch_dtype)
            b = torch.randn(n, n, device=device.torch_device, dtype=torch_dtype)
            t = time_cuda(lambda: torch.matmul(a, b), warmup_ms=100, rep_ms=300)  # noqa: B023  (called at once)
            rates.append(2 * n**3 / (t.median_ms * 1e-3) / 1e12)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return max(rates)


def device_peaks(store: PeakStore, device: DeviceInfo, *, remeasure: bool = False) -> Peaks | None:
    """The stored ceilings of `device`, measuring (and storing) the missing ones; None on the interpreter."""
    if device.is_interpreter:
        return None
    stored = store.peaks(device)
    wanted: dict[str, tuple[str, Callable[[], float], str]] = {
        COPY: ("GB/s", lambda: measure_copy(device), f"copy_ of 1 GiB ({2 * COPY_BYTES >> 30} GiB moved)")}
    for dtype in DTYPES:
        wanted[matmul_name(dtype)] = ("TFLOP/s", functools.partial(measure_matmul, device, dtype),
                                      f"torch.matmul, best of {' and '.join(f'{n}^3' for n in MATMUL_SIZES)} {dtype}" + (" (TF32)" if dtype == "float32" else ""))
    for name, (unit, measure, method) in wanted.items():
        if remeasure or name not in stored:
            stored[name] = measure()
            store.save_peak(device, name=name, value=stored[name], unit=unit, method=method)
    return Peaks(stored[COPY], {d: stored[matmul_name(d)] for d in DTYPES})
