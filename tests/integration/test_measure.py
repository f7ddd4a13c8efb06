"""The measurement boundary's processes: a fork server's children, and compiles ahead of the search."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.engine.measure import processes
from autotuner.engine.measure.live import LiveMeasurer
from autotuner.engine.measure.trial_process import WorkerSpec
from search_spaces.space import config_key
from tests.integration.test_cli import _alive
from tests.support import stand_in_cuda


def _report_env(conn, env):
    processes.adopt(env)
    conn.send(os.environ.get("AUTOTUNER_PROBE"))


def test_a_child_sees_the_environment_of_when_it_is_made(monkeypatch):
    """Children fork from a server started earlier; they still get the parent's environment as it is now."""
    processes.start()
    monkeypatch.setenv("AUTOTUNER_PROBE", "set after the fork server started")
    ctx = processes.context()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_report_env, args=(child, processes.environment()))
    proc.start()
    try:
        assert parent.poll(120)
        assert parent.recv() == "set after the fork server started"
    finally:
        proc.join(30)


def _report_triton_key(conn, env):
    processes.adopt(env)
    import triton.runtime.cache as cache

    conn.send((cache.triton_key(), hasattr(cache.triton_key, "cache_info"), os.environ.get(processes.TRITON_KEY)))


def test_a_child_is_handed_tritons_installation_hash_instead_of_hashing_it(monkeypatch):
    """The command hashes Triton's files once (libtriton's half a GiB among them); every child it makes gets the
    hash, and none of them computes it again. A value set in the environment by anyone else is never passed on."""
    processes.start()
    monkeypatch.setenv(processes.TRITON_KEY, "set by someone else")
    monkeypatch.setattr(processes, "_triton_key", {})
    processes.hash_triton()  # what start() runs where kernels compile (not under the interpreter)
    from triton.runtime.cache import triton_key

    env = processes.environment()
    assert env[processes.TRITON_KEY] == triton_key()
    ctx = processes.context()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_report_triton_key, args=(child, env))
    proc.start()
    try:
        assert parent.poll(120)
        key, hashed_itself, left_in_env = parent.recv()
    finally:
        proc.join(30)
    assert key == triton_key() and not hashed_itself and left_in_env is None


def test_speculative_compiles_take_idle_pool_workers_only_and_count_when_asked():
    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    device = current_device()
    configs = sm.space.enumerate(problem, device).valid[:6]
    measurer = LiveMeasurer(WorkerSpec("softmax", asdict(problem), (), None), 120, compile_workers=2)
    try:
        measurer.compile_ahead(configs[:1])
        measurer.speculate(configs[1:])
        in_flight = [k for k, f in measurer._ahead.items() if not f.done()]
        assert len(in_flight) <= 2  # the asked config and one guess: never more than the pool is wide
        assert config_key(configs[0]) in measurer._ahead
        first = measurer.measure(configs[0])
        assert first.status == "ok" and first.compile_s is not None
        # a guess the search then asks for is measured with the compile the pool already did
        guessed = next(c for c in configs[1:] if config_key(c) in measurer._ahead)
        assert isinstance(measurer._ahead[config_key(guessed)].result(60), float)  # the pool's first launch
        measurer.compile_ahead([guessed])
        assert measurer.measure(guessed).status == "ok"
        assert config_key(guessed) not in measurer._ahead  # consumed, not compiled again
        # guesses no longer wanted are dropped unless already started; nothing asked is ever dropped
        measurer.compile_ahead(configs[5:6])
        measurer.speculate([])
        assert config_key(configs[5]) in measurer._ahead
        assert measurer.measure(configs[5]).status == "ok"
    finally:
        measurer.close()


def test_a_trial_worker_started_before_its_problem_sets_it_up_when_told():
    from autotuner.engine.measure.runner import TrialRunner

    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    spec = WorkerSpec("softmax", asdict(problem), (), None)
    default = sm.space.default(problem, current_device())
    runner, dead = TrialRunner(None), TrialRunner(None)
    try:
        runner.prestart(None)
        pid = runner._proc.pid
        runner.use(spec, 60)
        assert runner.measure(default).status == "ok"
        assert runner._proc.pid == pid and runner.restarts == 0  # set up in the process started before
        warm = runner.take_warm_s()  # how its start went, by part, once
        assert set(warm) == {"fork_s", "ops_s", "ready_s"} and warm["ready_s"] >= warm["fork_s"] >= 0
        assert runner.take_warm_s() == {}
        dead.prestart(None)
        dead._proc.kill()  # died before its first problem: the first trial starts a new one
        dead.use(spec, 60)
        assert dead.measure(default).status == "ok" and dead.restarts == 1
    finally:
        runner.close()
        dead.close()


def test_the_problem_is_set_up_in_the_trial_worker_while_the_compile_pool_still_starts(monkeypatch):
    """The tuner took its prestarted processes only once every compile-pool process had started (the fork server
    makes them one by one), and the trial worker set the problem up and timed torch's baseline only after the
    plan: the problem now goes to the trial worker as soon as that one is asked for, and is set up meanwhile."""
    from autotuner.engine.measure import compile_pool
    from autotuner.engine.measure.live import KeptProcesses
    from autotuner.engine.measure.runner import WorkerSetupError

    release = threading.Event()
    prestart = compile_pool.CompilePool.prestart

    def held(self, count=None):  # the pool's processes not started until released
        release.wait(20)
        return prestart(self, count)

    monkeypatch.setattr(compile_pool.CompilePool, "prestart", held)
    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    default = sm.space.default(problem, current_device())
    kept = KeptProcesses()
    kept.prestart(None, 2)
    measurer = None
    try:
        measurer = LiveMeasurer(WorkerSpec("softmax", asdict(problem), (), None), 120, 2, kept)
        base = measurer._base.result(60)  # set up, and the baseline timed, with start() not called yet
        assert base.status == "ok" and not release.is_set()
        release.set()
        assert measurer.start() is base
        measurer.compile_ahead([default])
        assert measurer.measure(default).status == "ok" and measurer.compiles == 1
        measurer.close()
        # a problem that cannot be set up is still start()'s error, and a measurer never started closes
        broken = WorkerSpec("softmax", {**asdict(problem), "dtype": "int8"}, (), None)
        measurer = LiveMeasurer(broken, 120, 2, kept)
        with pytest.raises(WorkerSetupError, match="could not set up"):
            measurer.start()
        measurer.close()
        measurer = LiveMeasurer(WorkerSpec("softmax", asdict(problem), (), None), 120, 2, kept)
        measurer.close()  # never started: its set-up done, or stopped with the process, by the time it returns
        assert measurer._base.done()
        measurer = None
    finally:
        release.set()
        if measurer is not None:
            measurer.close()
        kept.close()


POOL_OF_A_THREAD = """
import os, sys, threading, time
from autotuner.engine.measure import compile_pool

pool = compile_pool.CompilePool(None, 2)
starting = threading.Thread(target=lambda: [task.result(120) for task in pool.prestart()])
starting.start()
starting.join()  # (the thread that started the processes, ended once they had set themselves up)
time.sleep(1)
pool._ensure().submit(compile_pool._started).result(60)
print(*[p.pid for p in pool._pool._processes.values()], flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal; reads /proc")
def test_a_pools_processes_outlive_the_thread_that_started_them_and_end_with_its_process():
    """A pool's processes are started by whichever thread submits first (a prestart's, which ends at once). They
    asked Linux to kill them when their parent died, which is the thread that started a process, not its process:
    a tune's pool broke whenever that thread ended after its processes were up. They outlive it now, and still end
    with the process that started them."""
    proc = subprocess.Popen([sys.executable, "-c", POOL_OF_A_THREAD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip(), proc.stderr.read() if proc.poll() is not None else "no pids"
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2
    finally:
        proc.kill()
        proc.wait(10)
    deadline = time.monotonic() + 30

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return not _zombie(pid)

    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), pids


def test_a_pool_whose_process_died_compiles_the_next_config_in_a_new_one():
    """A pool process killed (out of memory, say) broke the pool for good: the next config's submit raised, and the
    tune ended with a traceback. The next submit now starts a new pool."""
    from autotuner.engine.measure import compile_pool

    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    spec = WorkerSpec("softmax", asdict(problem), (), None)
    pool = compile_pool.CompilePool(spec, 2)
    try:
        for task in pool.prestart():
            task.result(120)
        victim = next(iter(pool._pool._processes.values()))
        victim.kill()
        victim.join(10)
        deadline = time.monotonic() + 30
        while not pool._pool._broken and time.monotonic() < deadline:  # (its manager thread notices)
            time.sleep(0.05)
        assert pool._pool._broken
        assert isinstance(pool.submit(sm.space.default(problem, current_device())).result(120), float)
    finally:
        pool.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="Unix process priorities")
def test_a_prestarted_pools_processes_start_at_its_lower_priority():
    """A pool's processes lowered themselves once their imports were done; started with the command, beside the fork
    server's import of torch (which the trial worker waits for), they are lowered as they start, by the prestart or
    by the submit that starts them."""
    from autotuner.engine.measure import compile_pool

    pool = compile_pool.CompilePool(None, 2)
    try:
        tasks = pool.prestart(1)  # one now, the other started by a later submit
        tasks += [pool._submit(compile_pool._started) for _ in range(2)]
        procs = list(pool._pool._processes.values())
        lowered = [os.getpriority(os.PRIO_PROCESS, p.pid) for p in procs]  # (before the tasks can have run)
        for task in tasks:
            task.result(120)
        assert len(procs) == 2 and all(n >= compile_pool.NICE for n in lowered), lowered
        assert all(os.getpriority(os.PRIO_PROCESS, p.pid) == compile_pool.NICE for p in procs)  # (not lowered twice)
    finally:
        pool.close()


def test_the_first_configs_compile_while_the_trial_worker_is_still_being_started(monkeypatch):
    """The tuner's plan waited for the trial worker's process (forked once the fork server has imported torch) before
    it handed the compile pool its first configs, and the pool's processes were started only after it: now the pool
    starts on its own and compiles what it is given while the trial worker is still being started, which the
    problem's set-up alone waits for; a measurer closed meanwhile sets nothing up."""
    from autotuner.engine.measure.live import KeptProcesses
    from autotuner.engine.measure.runner import TrialRunner

    release = threading.Event()
    prestart = TrialRunner.prestart

    def held(self, device_index):  # the fork server still importing
        release.wait(60)
        prestart(self, device_index)

    monkeypatch.setattr(TrialRunner, "prestart", held)
    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    spec = WorkerSpec("softmax", asdict(problem), (), None)
    default = sm.space.default(problem, current_device())
    kept = KeptProcesses()
    kept.prestart(None, 2)
    measurer = None
    try:
        measurer = LiveMeasurer(spec, 120, 2, kept)  # (returns with the trial worker not started)
        measurer.compile_ahead([default])
        compiled = measurer._ahead[config_key(default)].result(120)
        assert isinstance(compiled, float) and not release.is_set() and not measurer._base.done()
        release.set()
        assert measurer.start().status == "ok"
        assert measurer.measure(default).status == "ok" and measurer.compiles == 1
        measurer.close()
        release.clear()
        kept.close()
        kept.prestart(None, 2)
        measurer = LiveMeasurer(spec, 120, 2, kept)
        threading.Timer(0.5, release.set).start()
        measurer.close()  # closed before its trial worker was there
        assert isinstance(measurer._base.exception(10), RuntimeError) and kept.runner.setup_s == {}
        measurer = None
    finally:
        release.set()
        if measurer is not None:
            measurer.close()
        kept.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_fork_server_ends_with_its_command_without_tearing_its_interpreter_down(tmp_path):
    """Once the command has ended, its fork server (holding the command's standard output and error) ends at once:
    its interpreter's tear-down of torch and Triton kept a caller reading the command's output waiting after the
    command had exited. Its atexit handlers past server_exit's never run."""
    mark = tmp_path / "torn_down"
    code = ("from autotuner.engine.measure import processes\n"
            "processes.PRELOAD.insert(0, 'tests.support.teardown_marker')\n"
            "processes.context().Process(target=print).start()  # (the server started, its preloads imported)\n"
            "from multiprocessing import forkserver\n"
            "print(forkserver._forkserver._forkserver_pid, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TEARDOWN_MARK": str(mark)})
    assert out.returncode == 0, out.stderr
    server = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server), "the fork server outlived its command"
    assert not mark.exists(), mark.read_text()


def test_the_fork_server_leaves_cuda_uninitialised_for_its_children(tmp_path):
    """A child of the fork server makes its own CUDA context, which it cannot where the server initialised CUDA
    before forking it: importing anything of autotuner's before torch did (the package picks Triton's backend,
    asking the driver itself), and every compile-pool process and trial worker on a GPU host failed. With a stand-in
    driver that finds a device, the command initialises it and the server never does."""
    env = stand_in_cuda.build(tmp_path, nvml=False)  # (no NVML to ask: the command asks the driver)
    code = ("import os\n"
            "from multiprocessing import forkserver\n"
            "from autotuner.engine.measure import processes\n"
            "child = processes.context().Process(target=print)\n"
            "child.start(); child.join(60)\n"
            "print(os.getpid(), forkserver._forkserver._forkserver_pid, child.exitcode, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    command, server, exitcode = out.stdout.split()[-3:]
    callers = stand_in_cuda.initialised(tmp_path)
    assert command in callers, "the stand-in driver was not the one loaded"
    assert server not in callers, "the fork server initialised CUDA: its children cannot"
    assert exitcode == "0"


def test_ctrl_c_while_the_fork_server_imports_leaves_it_serving_without_a_traceback(tmp_path):
    """A terminal's Ctrl-C reaches the fork server too (one process group): one that came while the server was
    still importing torch and Triton (a worker stopped as its first job started) killed it with a traceback under
    the command's. It is ignored there, and the server goes on to make children, which still stop on Ctrl-C."""
    mark, release = tmp_path / "importing", tmp_path / "release"
    code = ("import os, signal, time\n"
            "from pathlib import Path\n"
            "from multiprocessing import forkserver\n"
            "from autotuner.engine.measure import processes\n"
            "processes.PRELOAD.insert(0, 'tests.support.slow_preload')\n"
            "processes.start()\n"
            f"while not Path({str(mark)!r}).exists(): time.sleep(0.02)\n"
            "os.kill(forkserver._forkserver._forkserver_pid, signal.SIGINT)\n"
            "time.sleep(0.5)\n"
            f"Path({str(release)!r}).touch()\n"
            "child = processes.context().Process(target=signal.raise_signal, args=(signal.SIGINT,))\n"
            "child.start(); child.join(60)\n"
            "print('child', child.exitcode, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PRELOAD_MARK": str(mark), "PRELOAD_RELEASE": str(release)})
    server_part = out.stderr.split("Process ForkServerProcess")[0]  # (what precedes the child's own traceback)
    assert "KeyboardInterrupt" not in server_part, out.stderr
    assert out.returncode == 0 and out.stdout.split()[-2:] == ["child", "1"], (out.stdout, out.stderr)


def _paced_search(tmp_path, monkeypatch) -> tuple[Any, list[Any], LiveMeasurer, Any]:
    """The paced op's launch log (each launch of the trial process: "pid start end pause"), its configs, a measurer
    in a trial process (no compile pool) and an exhaustive search over them."""
    import tests.support.paced_op  # noqa: F401  (registers the op in this process too)
    from autotuner.engine.search.strategies import make_search

    log = tmp_path / "launches.log"
    monkeypatch.setenv("PACED_LOG", str(log))
    op = get_op("paced")
    problem = op.parse_problem("1000")
    configs = op.space.enumerate(problem, current_device()).valid
    measurer = LiveMeasurer(WorkerSpec("paced", asdict(problem), ("tests.support.paced_op",), None), 120, compile_workers=0)
    return log, configs, measurer, make_search("exhaustive", configs, op.space.params, len(configs))


def test_each_trial_is_recorded_while_the_trial_process_measures_the_next(tmp_path, monkeypatch):
    """Writing a trial (and guessing what to compile next) decides nothing about the next config: it is done
    while the trial process measures that one, not between the two measurements; every trial is recorded, in
    order, the last one too."""
    from autotuner.engine.search.loop import run_search

    log, configs, measurer, search = _paced_search(tmp_path, monkeypatch)
    recorded: list[tuple[int, float]] = []

    def on_trial(m) -> None:  # a slow write: 0.2 s
        time.sleep(0.2)
        recorded.append((m.config["PAUSE_US"], time.time()))

    try:
        measurer.start()
        done = run_search(search, measurer, budget=len(configs), on_trial=on_trial)
    finally:
        measurer.close()
    assert [pause for pause, _ in recorded] == [m.config["PAUSE_US"] for m in done] and len(done) == len(configs)
    launches = [line.split()[1:] for line in log.read_text().splitlines()]
    for (_, written), nxt in zip(recorded, done[1:], strict=False):
        # the next config's first launch (its checked run) began before this trial's write had ended: written one
        # after the other, it would have begun 0.2 s after
        assert min(float(start) for start, _, pause in launches if int(pause) == nxt.config["PAUSE_US"]) < written


def test_the_next_config_is_asked_while_the_trial_process_measures_this_one(tmp_path, monkeypatch):
    """The strategy's ask (milliseconds of TPE's time each) needs no answer of the trial process: the next config is
    asked while it measures one, so that it never waits for the search between two measurements."""
    from autotuner.engine.search.loop import run_search

    log, configs, measurer, search = _paced_search(tmp_path, monkeypatch)
    asks: list[tuple[float, float]] = []
    ask = search.ask

    def slow_ask(*args: Any, **kwargs: Any) -> Any:  # a strategy taking 0.3 s to choose
        started = time.time()
        time.sleep(0.3)
        try:
            return ask(*args, **kwargs)
        finally:
            asks.append((started, time.time()))

    monkeypatch.setattr(search, "ask", slow_ask)
    try:
        measurer.start()
        done = run_search(search, measurer, budget=len(configs))
    finally:
        measurer.close()
    assert len(done) == len(configs) >= 3
    spans = {}  # each config's launches in the trial process: (first start, last end)
    for line in log.read_text().splitlines():
        _, start, end, pause = line.split()
        first, last = spans.get(int(pause), (float(start), float(end)))
        spans[int(pause)] = (min(first, float(start)), max(last, float(end)))
    measuring = [spans[m.config["PAUSE_US"]] for m in done]
    # the asks after the first two (asked before any measurement: the one measured first and the one after it):
    # each while a measurement ran (between two, as they were, the trial process would have waited 0.3 s for each)
    later = asks[2:]
    assert len(later) == len(configs) - 2
    for a, b in later:
        assert any(first < b and a < last for first, last in measuring), (a, b, measuring)


def test_asked_configs_are_measured_as_their_compiles_finish():
    """A config whose compile is still running does not hold up one compiled after it."""
    from concurrent.futures import Future

    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    slow, quick = sm.space.enumerate(problem, current_device()).valid[:2]
    measurer = LiveMeasurer(WorkerSpec("softmax", asdict(problem), (), None), 120, compile_workers=2)
    try:
        measurer.compile_ahead([quick])
        measurer._ahead[config_key(slow)] = Future()  # a compile that has not finished (and will not here)
        assert measurer.first_ready([slow, quick]) == 1
        assert measurer.compile_wait_s > 0
        assert measurer.measure(quick).status == "ok"
    finally:
        measurer._ahead.pop(config_key(slow), None)
        measurer.close()


def test_the_compiles_counted_are_those_the_pool_was_given_and_kept():
    """`compiles` (the run's phases report it): a config handed to the pool twice counts once, and a guess taken
    back before a process started it does not count."""
    sm = get_op("softmax")
    problem = sm.parse_problem("8x64")
    a, b, c, d = sm.space.enumerate(problem, current_device()).valid[:4]
    measurer = LiveMeasurer(WorkerSpec("softmax", asdict(problem), (), None), 120, compile_workers=2)
    try:
        measurer.compile_ahead([a])
        measurer.compile_ahead([a])
        assert measurer.compiles == 1
        measurer.speculate([b, c, d])  # guesses, on idle processes only: never more than the pool's width at once
        assert 2 <= measurer.compiles <= 3
        measurer.speculate([])  # no longer wanted: the guesses not started are taken back
        assert measurer.compiles == len(measurer._ahead)
        assert measurer.measure(a).status == "ok"
    finally:
        measurer.close()


def test_interleaved_rounds_give_every_candidate_every_place():
    from autotuner.engine.measure.timing import rotation

    items = ["a", "b", "c", "d"]
    orders = [rotation(items, r) for r in range(len(items))]
    assert all(sorted(o) == items for o in orders)
    for place in range(len(items)):
        assert sorted(o[place] for o in orders) == items
    assert rotation(items, 5) == rotation(items, 1) and rotation([], 3) == []


def test_the_one_interleaving_loop_measures_in_rotation_drops_a_failure_and_stops_when_told():
    """`interleaved`, which the re-time, cross-timing, bench and the benchmarks share: every round in rotated
    order, a key answering None left out from then on, and `go_on` able to end the rounds early."""
    from autotuner.engine.measure.timing import interleaved, rotation

    calls: list[str] = []

    def measure(key: str) -> float | None:
        calls.append(key)
        return None if key == "b" and calls.count("b") == 2 else float(len(calls))

    out = interleaved(["a", "b", "c"], 3, measure)
    assert calls[:3] == rotation(["a", "b", "c"], 0) and calls[3:6] == rotation(["a", "b", "c"], 1)
    assert "b" not in out and calls.count("b") == 2 and len(out["a"]) == len(out["c"]) == 3
    stopped = interleaved(["a", "b"], 5, lambda k: 1.0, go_on=lambda r: r < 2)
    assert stopped == {"a": [1.0, 1.0], "b": [1.0, 1.0]}


def test_a_third_of_a_timing_is_a_third_of_its_repetitions_for_a_short_kernel_too():
    """A round of three interleaved rounds asks for a third of the repetitions: for a kernel of a few
    microseconds (the cap binds) as for a slow one (the milliseconds do)."""
    from autotuner.engine.measure.timing import MAX_REPS, MIN_REPS, repetitions

    assert repetitions(100.0, 0.005) == MAX_REPS and repetitions(100.0 / 3, 0.005, 1 / 3) == MAX_REPS // 3
    assert repetitions(100.0, 1.0) == 100 and repetitions(100.0 / 3, 1.0, 1 / 3) == 33
    assert repetitions(100.0, 50.0) == MIN_REPS and repetitions(1.0, 0.005, 0.01) == MIN_REPS


@pytest.mark.parametrize("cpu_ms,gpu_ms", [(0.4, 0.35), (0.1, 0.35), (0.4, 0.05), (0.02, 0.002), (2.0, 0.3)])
@pytest.mark.parametrize("reps", [3, 15, 100])
def test_the_gpu_sleeps_until_the_cpu_has_queued_each_timed_launch(cpu_ms: float, gpu_ms: float, reps: int):
    """The sleep before timed repetitions (engine.timing.queue_sleep_s), played out: the CPU queues a repetition
    (a flush, the start event, the launch, the end event) every `cpu_ms`, the GPU runs one in `gpu_ms` once its
    sleep ends; the GPU must reach no repetition's start event before the CPU has queued that launch, even with the
    CPU stalled once for its time of a repetition. And the sleep is not the CPU's time for all of them, twice over,
    as it was: where the GPU keeps up, a few repetitions' CPU time whatever their number."""
    from autotuner.engine.measure.timing import MAX_QUEUE_SLEEP_S, MIN_QUEUE_SLEEP_S, Pace, queue_sleep_s

    pace = Pace(gpu_ms=gpu_ms, cpu_s=cpu_ms / 1e3)
    sleep_ms = queue_sleep_s(reps, pace) * 1e3
    assert MIN_QUEUE_SLEEP_S * 1e3 <= sleep_ms <= MAX_QUEUE_SLEEP_S * 1e3
    flush_share = 0.5  # of a repetition's GPU time before its start event (the flush), and of its CPU time
    for stall_at in [None, *range(reps)]:
        gpu_free = sleep_ms  # when the GPU is done with what was queued before
        for i in range(reps):
            stall = cpu_ms if stall_at is not None and i >= stall_at else 0.0
            flush_queued = i * cpu_ms + stall
            launch_queued = flush_queued + cpu_ms  # (after the start event)
            start_reached = max(gpu_free, flush_queued) + flush_share * gpu_ms
            if sleep_ms < MAX_QUEUE_SLEEP_S * 1e3:
                assert start_reached >= launch_queued, (i, stall_at, sleep_ms)
            gpu_free = max(start_reached, launch_queued) + (1 - flush_share) * gpu_ms
    if gpu_ms >= cpu_ms:
        assert sleep_ms <= max(MIN_QUEUE_SLEEP_S * 1e3, 4 * cpu_ms)
    assert queue_sleep_s(reps, pace, 0.05) == pytest.approx(queue_sleep_s(reps, pace) + 0.05)


def test_a_handed_hash_of_another_triton_version_is_not_used():
    import triton.runtime.cache as cache

    before = cache.triton_key
    processes.use_triton_key("0.0.0-" + "0" * 64)  # a parent that found another installation
    assert cache.triton_key is before and hasattr(cache.triton_key, "cache_info")
