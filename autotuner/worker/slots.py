"""A worker's GPUs as slots: with several (`--gpus 0,1`) it runs a job on each at once, a thread each. More:
docs/design/service.md."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from autotuner.base.device import current_device
from autotuner.base.settings import Settings
from autotuner.engine.measure.live import KeptProcesses
from autotuner.engine.plan import more_devices
from autotuner.store.job_store import JobStore
from autotuner.store.rows import JobRow
from kernels._backend import interpreting


@dataclass(eq=False)
class Slot:
    gpu: int | None  # None: a CPU lane under the interpreter
    index: int
    kept: KeptProcesses
    job: JobRow | None = None  # the job it runs (its first slot's, for a job on several)
    store: JobStore | None = None  # set by the job's thread once its store is made
    thread: threading.Thread | None = None
    borrowed_by: Slot | None = None  # the slot whose job measures on this one's GPU too
    stop_reason: BaseException | None = field(default=None, repr=False)

    @property
    def free(self) -> bool:
        return self.job is None and self.borrowed_by is None

    def interrupt(self, reason: BaseException) -> None:
        """Stop this slot's job: its next write raises `reason`, and its trial worker is killed now."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.store is not None:
            self.store.stop(reason)
        if self.kept.runner is not None and self.kept.runner.in_flight:
            self.kept.runner.close(wait=False)


class Slots:
    """The slots of a worker's GPUs, and the jobs running on them."""

    def __init__(self, gpus: tuple[int | None, ...], kept: list[KeptProcesses]) -> None:
        self.slots = [Slot(gpu, i, k) for i, (gpu, k) in enumerate(zip(gpus, kept, strict=True))]
        self.changed = threading.Condition()  # notified when a job ends

    @property
    def busy(self) -> list[Slot]:
        return [s for s in self.slots if s.job is not None]

    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.free]

    def wait(self, timeout_s: float) -> None:
        """Until a job ends, or `timeout_s`."""
        with self.changed:
            self.changed.wait(timeout_s)

    def start(self, job: JobRow, slots: list[Slot], run: Callable[[Slot, list[Slot]], None]) -> None:
        """Run `job` in a thread, on `slots` (the first is its own; the others lend it their GPUs)."""
        first, *others = slots
        first.job, first.stop_reason, first.store = job, None, None
        for other in others:
            other.borrowed_by = first

        def body() -> None:
            try:
                run(first, others)
            finally:
                with self.changed:
                    first.job, first.store, first.thread = None, None, None
                    for other in others:
                        other.borrowed_by = None
                    self.changed.notify_all()

        first.thread = threading.Thread(target=body, name=f"job-{job.id}-gpu{first.gpu}", daemon=True)
        first.thread.start()

    def interrupt_all(self, reason: BaseException) -> None:
        for slot in self.busy:
            slot.interrupt(reason)
            for other in self.slots:
                if other.borrowed_by is slot and other.kept.runner is not None:
                    other.kept.runner.close(wait=False)

    def join(self) -> None:
        for slot in list(self.slots):
            thread = slot.thread
            if thread is not None:
                thread.join()


def start_slots(settings: Settings, gpus: tuple[int, ...], kept: KeptProcesses) -> tuple[KeptProcesses, Slots]:
    """A kept trial worker on each GPU, and one compile pool for them all (on the first GPU, sized for the host's
    share of these GPUs), starting now; the worker's own kept processes (`kept`, the pool's holder on a GPU)."""
    from autotuner.engine.measure.compile_pool import CompilePool
    from autotuner.engine.measure.live import host_compile_workers

    devices: tuple[int | None, ...] = tuple(None if interpreting() else g for g in gpus)
    if not interpreting():
        more_devices(current_device(gpus[0]), gpus)  # one device type, each GPU there
        pool = CompilePool(None, host_compile_workers(settings) * len(gpus), gpus[0], shared=True)
        kept = KeptProcesses(pool)
        threading.Thread(target=pool.prestart, name="pool-prestart", daemon=True).start()
    each = [KeptProcesses(kept.pool) for _ in devices]
    for k, device in zip(each, devices, strict=True):
        k.prestart(device, 0)
    return kept, Slots(gpus, each)
