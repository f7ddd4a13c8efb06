"""The command line as a new user meets it: clear errors with exit codes and nothing half-written, user text
printed as text, reads that never create databases, progress in a log, and interruption."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.store.database import Store

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotuner", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.fixture
def tuned_db(tmp_path: Path) -> Path:
    """A database holding one stored softmax result (64x1000) on this device, written through the Store."""
    path = tmp_path / "tuned.db"
    store, op, device = Store(f"sqlite:///{path}"), get_op("softmax"), current_device()
    problem = op.parse_problem("64x1000")
    run_id = store.start_run(op=op, problem=problem, device=device, strategy="tpe", budget_trials=1,
                             budget_seconds=None, clock="wall-clock")
    config = op.space.default(problem, device)
    store.record_trial(run_id=run_id, config=config, config_key="k", status="ok", median_ms=1.5)
    store.finish_run(run_id=run_id, status="done")
    store.save_best(op=op, problem=problem, device=device, config=config, median_ms=1.5, default_ms=1.5,
                    torch_ms=None, run_id=run_id)
    store.engine.dispose()
    return path


def test_help_shows_flags_without_a_value_placeholder():
    for args in (["--help"], ["tune", "--help"], ["show", "--help"]):
        out = cli(*args)
        assert out.returncode == 0
        assert "--help" in out.stdout and "<bool>" not in out.stdout, out.stdout
    tune = cli("tune", "--help").stdout
    for option, owner in (("--epilogue", "matmul"), ("--causal", "attention"), ("--approximate", "gelu")):
        assert option in tune and owner in tune  # built from the ops' declarations


def test_user_text_is_printed_as_text_not_markup(tmp_path):
    out = cli("tune", "[/x]", "--shape", "4x4", "--db", f"sqlite:///{tmp_path / 'a.db'}")
    assert out.returncode == 2 and "unknown op '[/x]'" in out.stderr and "Traceback" not in out.stderr
    out = cli("tune", "softmax", "--shape", "4x[red]4", "--db", f"sqlite:///{tmp_path / 'a.db'}")
    assert out.returncode == 2 and "'4x[red]4'" in out.stderr


def test_database_urls_that_cannot_work_are_named(tmp_path):
    a_file = tmp_path / "plain.txt"
    a_file.write_text("not a folder")
    out = cli("tune", "softmax", "--shape", "8x64", "--db", f"sqlite:///{a_file}/x.db")
    assert out.returncode == 3 and f"{a_file} is a file, not a folder" in out.stderr and "Traceback" not in out.stderr
    out = cli("show", "softmax", "--shape", "8x64", "--db", "foo://host/db")
    assert out.returncode == 3 and "unknown database scheme 'foo'" in out.stderr


def test_read_commands_never_create_a_database(tmp_path):
    typo = tmp_path / "typo" / "results.db"
    url = f"sqlite:///{typo}"
    show = cli("show", "softmax", "--shape", "8x64", "--db", url, "--json")
    assert show.returncode == 1 and json.loads(show.stdout)["source"] == "default"
    assert "no database at" in json.loads(show.stdout)["reason"]
    explain = cli("show", "softmax", "--shape", "8x64", "--db", url, "--explain")
    assert explain.returncode == 1 and "no database at" in explain.stdout  # as without --explain
    for args in (["export"], ["report", "-o", str(tmp_path / "r.png")]):
        out = cli(*args, "--db", url)
        assert out.returncode == 3 and "no database at" in out.stderr, out.stderr
    assert not typo.parent.exists()


@pytest.mark.parametrize("args", [("worker", "--gpus", "all", "--until-empty"), ("worker", "--gpu", "0", "--once"),
                                  ("tune", "softmax", "--shape", "64x64")])
def test_no_cuda_device_and_no_interpreter_is_one_clear_line(args, tmp_path):
    """A process that sees no CUDA device with Triton's interpreter off (a container started without its GPU) says
    so in one line and exits with the set-up code, as every other set-up error does, not with a traceback."""
    db = tmp_path / "none.db"
    out = cli(*args, "--db", f"sqlite:///{db}", env={"TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""},
              timeout=120)
    assert out.returncode == 4, (out.returncode, out.stderr)
    assert out.stderr.startswith("error: TRITON_INTERPRET is off but no CUDA device is visible"), out.stderr
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout


def test_a_read_only_database_refuses_writes_clearly_and_loses_nothing(tuned_db, tmp_path):
    ro = f"sqlite:///file:{tuned_db}?mode=ro&uri=true"
    before = (rows(tuned_db, "tuning_runs"), rows(tuned_db, "trials"))
    out = cli("tune", "softmax", "--shape", "8x64", "--trials", "1", "--db", ro, "-q")
    assert out.returncode == 3 and "refused a write" in out.stderr and "Traceback" not in out.stderr
    export = tmp_path / "e.json"
    assert cli("export", "--db", f"sqlite:///{tuned_db}", "-o", str(export)).returncode == 0
    out = cli("import", str(export), "--db", ro)
    assert out.returncode == 3 and "refused a write" in out.stderr
    assert (rows(tuned_db, "tuning_runs"), rows(tuned_db, "trials")) == before
    shown = cli("show", "softmax", "--shape", "64x1000", "--db", ro, "--json")  # reads still work
    assert shown.returncode == 0 and json.loads(shown.stdout)["source"] == "exact"


@pytest.mark.parametrize("damage, named", [
    (lambda d: d.update(runs=5), "runs: Input should be a valid list"),
    (lambda d: d["devices"].__setitem__(0, {"key": d["devices"][0]["key"]}), "devices.0.name: Field required"),
    (lambda d: d["runs"][0]["trials"][0].update(median_ms="fast"), "runs.0.trials.0.median_ms"),
    (lambda d: d.pop("devices"), "devices: Field required"),
    (lambda d: d["best_configs"][0].update(run=7), "best_configs.0.run: 7 is not a run of the file"),
])
def test_a_malformed_import_names_the_fault_and_writes_nothing(tuned_db, tmp_path, damage, named):
    from autotuner.store.transfer import export_data

    export = tmp_path / "e.json"  # written as `autotuner export` writes it (the export is tested on its own)
    data = json.loads(json.dumps(export_data(Store(f"sqlite:///{tuned_db}", create=False))))
    damage(data)
    export.write_text(json.dumps(data))
    target = tmp_path / "target.db"
    Store(f"sqlite:///{target}").engine.dispose()
    out = cli("import", str(export), "--db", f"sqlite:///{target}")
    assert out.returncode == 2 and named in out.stderr and "nothing was imported" in out.stderr, out.stderr
    assert rows(target, "devices") == rows(target, "tuning_runs") == rows(target, "best_configs") == 0


def test_replay_refuses_landscapes_it_cannot_replay(tmp_path):
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"params": ["A"], "trials": [{"config": {"A": 1}, "ms": None}]}))
    out = cli("replay", str(failed), "--budget", "1")
    assert out.returncode == 2 and "no trial has a time" in out.stderr
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"params": ["A", "B"], "trials": [{"config": {"A": 1}, "ms": 1.0}]}))
    out = cli("replay", str(partial), "--budget", "1")
    assert out.returncode == 2 and "trial 0 has no value for B" in out.stderr


def test_a_problem_too_large_for_the_device_is_refused_before_anything_is_written(tmp_path):
    db = tmp_path / "big.db"
    # beyond the kernels' 32-bit offsets
    out = cli("tune", "softmax", "--shape", "100000000x100000000", "--db", f"sqlite:///{db}")
    assert out.returncode == 2 and "32-bit offsets" in out.stderr and "choose a smaller shape" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) <= 3
    # more memory than the device (here, the configured cap) holds
    out = cli("tune", "softmax", "--shape", "20000x20000", "--db", f"sqlite:///{db}",
              env={"AUTOTUNER_MAX_PROBLEM_BYTES": str(10**9)})
    assert out.returncode == 2 and "needs about 6.4 GB" in out.stderr and "AUTOTUNER_MAX_PROBLEM_BYTES" in out.stderr
    assert rows(db, "tuning_runs") == rows(db, "trials") == 0


def test_show_answers_from_the_nearest_tuned_problem_and_says_whose_times(tuned_db):
    out = cli("show", "softmax", "--shape", "256x1000", "--db", f"sqlite:///{tuned_db}", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["source"] == "nearest" and info["from_problem"] == "64x1000:float16"
    assert info["timing_problem"] == "64x1000:float16" and info["median_ms"] == 1.5
    text = cli("show", "softmax", "--shape", "256x1000", "--db", f"sqlite:///{tuned_db}")
    assert "nearest tuned problem" in text.stdout and "measured on that problem" in text.stdout


def test_show_says_when_the_library_call_launches_torchs_op(tuned_db):
    store, op, device = Store(f"sqlite:///{tuned_db}"), get_op("softmax"), current_device()
    problem = op.parse_problem("128x1000")  # a result whose tune timed torch's op faster than its best config
    store.save_best(op=op, problem=problem, device=device, config=op.space.default(problem, device), median_ms=1.5,
                    default_ms=1.5, torch_ms=1.0, run_id=None)
    store.engine.dispose()
    info = json.loads(cli("show", "softmax", "--shape", "128x1000", "--db", f"sqlite:///{tuned_db}", "--json").stdout)
    assert info["source"] == "exact" and info["launches_torch"] is True
    text = cli("show", "softmax", "--shape", "128x1000", "--db", f"sqlite:///{tuned_db}").stdout
    assert "launches torch's op instead" in " ".join(text.split())
    other = json.loads(cli("show", "softmax", "--shape", "64x1000", "--db", f"sqlite:///{tuned_db}", "--json").stdout)
    assert other["launches_torch"] is False  # no torch time stored there


def test_progress_in_a_log_names_the_budget_and_every_phase(tmp_path):
    out = cli("tune", "softmax", "--shape", "8x64", "--trials", "3", "--db", f"sqlite:///{tmp_path / 'p.db'}")
    assert out.returncode == 0, out.stderr
    log = out.stderr
    for phase in ("setup:", "search: 3 configs of", "re-time:", "record:"):
        assert phase in log, log
    assert [line.split("trial ")[1].split(" ")[0] for line in log.splitlines() if "] trial " in line] == \
        ["1/3", "2/3", "3/3"]


def _children(pid: int) -> set[int]:
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.add(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_the_trial_worker_and_marks_the_run_interrupted(tmp_path):
    db = tmp_path / "term.db"
    proc = subprocess.Popen([sys.executable, "-m", "autotuner", "tune", "softmax", "--shape", "32x300", "--strategy",
                             "exhaustive", "--db", f"sqlite:///{db}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stderr is not None
    deadline = time.time() + 120
    for line in proc.stderr:
        if "] trial 1/" in line or time.time() > deadline:
            break
    kids = _children(proc.pid)
    assert kids, "the tune process has no trial worker"
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "marked interrupted" in rest, rest
    time.sleep(1)
    assert not [k for k in kids if _alive(k)], "a child of the tune process outlived it"
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM tuning_runs").fetchall() == [("interrupted",)]


def test_worker_once_gives_up_on_a_database_that_cannot_open(tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a SQLite file" * 100)
    t0 = time.time()
    out = cli("worker", "--once", "--db", f"sqlite:///{corrupt}", env={"AUTOTUNER_DB_WAIT_S": "1",
                                                                          "AUTOTUNER_POLL_S": "0.2"}, timeout=120)
    assert out.returncode == 3 and "gave up after" in out.stderr, out.stderr + out.stdout
    assert time.time() - t0 < 60


def test_the_worker_log_prints_error_text_verbatim(tmp_path):
    """Error text from a job (here its op name, as a C++ allocator message would read) is logged as written."""
    db = tmp_path / "w.db"
    store = Store(f"sqlite:///{db}")
    store.queue_job(op="[enforce fail at alloc_cpu.cpp:127]", shape="8x8", dtype="float16", options={})
    store.engine.dispose()
    out = cli("worker", "--once", "--db", f"sqlite:///{db}")
    assert out.returncode == 0, out.stderr
    assert "job 1: [enforce fail at alloc_cpu.cpp:127] 8x8 float16" in out.stdout, out.stdout


def test_tune_json_gives_every_phase_and_its_run_exports_as_a_landscape(tmp_path):
    db = f"sqlite:///{tmp_path / 't.db'}"
    t0 = time.monotonic()
    out = cli("tune", "softmax", "--shape", "8x64", "--strategy", "exhaustive", "--trials", "6", "--db", db,
              "--json")
    wall = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    phases = result["phases"]
    assert {"startup_s", "setup_s", "search_s", "compile_s", "retime_s", "record_s"} <= set(phases)
    assert 0 < phases["startup_s"] < wall and phases["startup_s"] + result["elapsed_s"] <= wall
    land = tmp_path / "l.json"
    out = cli("export", "--format", "landscape", "--op", "softmax", "--shape", "8x64", "--db", db, "-o", str(land))
    assert out.returncode == 0, out.stderr
    data = json.loads(land.read_text())
    assert len(data["trials"]) == 6 and data["rejected"] == result["rejected"]
    assert {json.dumps(t["config"], sort_keys=True) for t in data["trials"]} == \
        {json.dumps(t["config"], sort_keys=True) for t in result["trials"]}
    replayed = cli("replay", str(land), "--budget", "3", "--json")
    assert replayed.returncode == 0 and json.loads(replayed.stdout)["evaluations"] == 3
    missing = cli("export", "--format", "landscape", "--op", "softmax", "--shape", "16x64", "--db", db)
    assert missing.returncode == 2 and "no run of softmax 16x64:float16" in missing.stderr


def test_plugins_are_named_plainly_and_a_bad_one_is_one_line(tmp_path):
    """AUTOTUNER_PLUGINS takes a name, names separated by commas, or a JSON list; a module that cannot be imported
    or a malformed value ends the command in one line naming the variable, not a traceback."""
    from autotuner.base.settings import Settings

    for value, names in (("tests.support.faulty_op", ["tests.support.faulty_op"]), ("a, b.c", ["a", "b.c"]), ('["x"]', ["x"]),
                         ("", [])):
        assert Settings(_env_file=None, plugins=value).plugins == names, value
    db = f"sqlite:///{tmp_path / 'p.db'}"
    for value, said in (("no_such_module", "AUTOTUNER_PLUGINS names 'no_such_module', which cannot be imported"),
                        ("my-module", "'my-module' is not a module name"), ("[oops", "'[oops' is not a JSON list")):
        out = cli("show", "softmax", "--shape", "4x4", "--db", db, env={"AUTOTUNER_PLUGINS": value})
        assert out.returncode == 4 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    out = cli("ops", "--json", env={"AUTOTUNER_PLUGINS": "tests.support.faulty_op"})
    assert out.returncode == 0 and "faulty" in {o["op"] for o in json.loads(out.stdout)}


def test_show_picks_the_dtype_a_decorated_kernel_was_tuned_in_and_rounds_its_numbers(tmp_path):
    import tests.support.decorated_kernels  # noqa: F401  (registers the kernel in this process)

    db = f"sqlite:///{tmp_path / 'k.db'}"
    store, op, device = Store(db), get_op("tests.support.decorated_kernels:scale_kernel"), current_device()
    problem = op.parse_problem("n=4096", "float32")
    store.save_best(op=op, problem=problem, device=device, config={"BLOCK": 64, "num_warps": 2, "num_stages": 3},
                    median_ms=0.123456789, default_ms=0.325082487, torch_ms=None, run_id=None)
    out = cli("show", "tests.support.decorated_kernels:scale_kernel", "--shape", "n=4096", "--db", db, "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["source"] == "exact" and shown["problem"] == "n=4096:float32"  # not float16, which has nothing
    assert shown["median_ms"] == 0.1235 and shown["speedup_vs_default"] == 2.633
    table = cli("show", "tests.support.decorated_kernels:scale_kernel", "--shape", "n=4096", "--db", db)
    assert "2.63x" in table.stdout and "2.6330" not in table.stdout
    store.save_best(op=op, problem=op.parse_problem("n=4096", "float16"), device=device,
                    config={"BLOCK": 32, "num_warps": 1, "num_stages": 3}, median_ms=0.2, default_ms=0.2,
                    torch_ms=None, run_id=None)
    two = cli("show", "tests.support.decorated_kernels:scale_kernel", "--shape", "n=4096", "--db", db)
    assert two.returncode == 2 and "is tuned in float16, float32: give one with --dtype" in two.stderr


def test_ops_lists_every_op_and_dimension_flags_come_from_the_problem_type(tmp_path):
    out = cli("ops", "--json")
    ops = {o["op"]: o for o in json.loads(out.stdout)}
    assert {"attention", "gelu", "layernorm", "matmul", "softmax"} <= set(ops)
    assert ops["matmul"]["shape_flags"] == ["M", "N", "K"] and ops["softmax"]["shape_flags"] == []
    assert ops["softmax"]["call"] == "autotuner.softmax(x)"
    db = f"sqlite:///{tmp_path / 'f.db'}"
    for args, said in ((["softmax", "--M", "4"], "--M is not softmax's; it takes --shape"),
                       (["matmul", "--N", "4"], "matmul needs --M when given --N"),
                       (["matmul", "--shape", "4x4x4", "--M", "4"], "give matmul --shape or --M/--N/--K, not both")):
        bad = cli("show", *args, "--db", db)
        assert bad.returncode == 2 and said in bad.stderr, bad.stderr


def test_time_budget_bounds_the_whole_command(tmp_path):
    # 20 s: on two busy cores (the suite's other worker) the command's start-up alone took 6 s, and a budget spent
    # before a first config was measured is an error by design (exit 1), which is not what this test is about
    out = cli("tune", "softmax", "--shape", "64x1000", "--time-budget", "20", "--here", "--json",
              "--db", f"sqlite:///{tmp_path / 'tb.db'}")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    phases = result["phases"]
    spent = sum(phases.get(p, 0.0) for p in ("startup_s", "setup_s", "search_s", "retime_s", "record_s"))
    # start-up, set-up, search and re-time together: the search takes most of what is left, the re-time the rest
    # in whole rounds (each round's time is known from the one before; one more second for the last)
    assert spent <= 20 + 3, phases
    assert phases["search_s"] > 0 and len(result["trials"]) >= 1


def test_help_names_kinds_in_words_and_small_items_answer_plainly(tmp_path):
    for command in (["tune"], ["show"], ["bench"], ["export"], ["serve"], ["worker"], ["replay"], ["db", "upgrade"]):
        shown = cli(*command, "--help", env={"COLUMNS": "160"})
        assert shown.returncode == 0 and not re.search(r"<(str|int|float|path)", shown.stdout), shown.stdout
    url = f"sqlite:///{tmp_path / 'small.db'}"
    assert cli("tune", "softmax", "--shape", "8x64", "--trials", "2", "-q", "--db", url).returncode == 0
    typo = cli("export", "--op", "softmaxx", "--db", url)
    assert typo.returncode == 2 and "nothing to export for 'softmaxx'" in typo.stderr
    assert cli("export", "--op", "softmax", "--db", url).returncode == 0
    queued = cli("tune", "softmax", "--shape", "16x64", "--queue", "--json", "--db", url)
    assert queued.returncode == 0 and json.loads(queued.stdout)["problem"] == "16x64:float16", queued.stderr
    bench = cli("bench", "softmax", "--shape", "8x64", "--rounds", "1", "--no-compile", "--db", url)
    assert bench.returncode == 0 and "GB/s" not in bench.stdout and "vs torch" not in bench.stdout, bench.stdout


def test_start_up_is_this_commands_own_when_a_shell_execs_it_after_other_work(tmp_path):
    # `sh -c 'pip install ... && autotuner tune ...'`: the shell may exec the last command in its own process,
    # whose start is then the shell's (with pip's minutes in it)
    line = (f"sleep 8 && exec {sys.executable} -m autotuner tune softmax --shape 8x64 --trials 1 --here --json "
            f"--db sqlite:///{tmp_path / 's.db'}")
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["phases"]["startup_s"] < 8  # not the shell's sleep


def test_the_console_script_imports_a_kernel_module_from_the_current_folder(tmp_path):
    import shutil

    script = shutil.which("autotuner")
    if script is None:  # the README's install puts it on PATH
        pytest.fail("no `autotuner` console script on PATH: install the package (pip install -e .)")
    (tmp_path / "mykern.py").write_text(
        "import triton, triton.language as tl\nimport autotuner\n\n"
        "@autotuner.autotune(configs=[triton.Config({'BLOCK': 32})], key=['n'])\n@triton.jit\n"
        "def double(x_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)\n")
    out = subprocess.run([script, "show", "mykern:double", "--shape", "n=8", "--db", f"sqlite:///{tmp_path / 'm.db'}",
                          "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 1 and json.loads(out.stdout)["source"] == "default", out.stderr  # found: nothing tuned


def test_a_triton_export_lists_each_config_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, op, device = Store(url), get_op("softmax"), current_device()
    for shape in ("8x64", "16x64", "32x64"):
        problem = op.parse_problem(shape, "float16")
        store.save_best(op=op, problem=problem, device=device, config=op.space.default(op.parse_problem("8x64"), device),
                        median_ms=0.5, default_ms=None, torch_ms=None, run_id=None)
    out = cli("export", "--op", "softmax", "--format", "triton", "--db", url)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "triton.Config(" in line]
    assert len(lines) == 1 and "(and 2 more)" in lines[0], out.stdout


HERE_KERNEL = '''
import triton, triton.language as tl
import autotuner


@autotuner.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''
RECORD_ONCE = '''
import torch, triton
import herekern
x = torch.randn(100)
herekern.scale[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, torch.empty(100), 100)
'''


def test_the_console_script_tunes_a_kernel_of_the_current_folder_in_its_trial_worker(tmp_path):
    """The installed `autotuner` script (whose sys.path holds its own folder, not the current one): the trial worker
    imports the module of the current folder as the command itself does."""
    import shutil

    script = Path(sys.executable).with_name("autotuner")
    script = str(script) if script.exists() else shutil.which("autotuner")
    assert script is not None, "the autotuner console script is installed with the package"
    (tmp_path / "herekern.py").write_text(HERE_KERNEL)
    (tmp_path / "record.py").write_text(RECORD_ONCE)
    env = {**os.environ, "AUTOTUNER_DB_URL": f"sqlite:///{tmp_path / 'h.db'}", "AUTOTUNER_RECORD": "1",
           "AUTOTUNER_ON_MISS": "default"}
    env.pop("PYTHONPATH", None)
    recorded = subprocess.run([sys.executable, "record.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    tuned = subprocess.run([script, "tune", "herekern:scale", "--shape", "n=100", "--dtype", "float32", "--trials",
                            "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert tuned.returncode == 0 and "ModuleNotFoundError" not in tuned.stderr, tuned.stderr[-2000:]


def test_a_trial_still_running_when_the_time_budget_ends_is_cut(tmp_path):
    """A trial that would outlast the whole command's budget (each launch of paced_slow pauses 2 s) is cut at the
    deadline, and the command says nothing was measured in time, instead of running the trial to its end."""
    import time

    t0 = time.monotonic()
    out = cli("tune", "paced_slow", "--shape", "64", "--time-budget", "6", "--here", "--db",
              f"sqlite:///{tmp_path / 'cut.db'}", env={"AUTOTUNER_PLUGINS": "tests.support.paced_op"})
    wall = time.monotonic() - t0
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert wall < 6 + 4, (wall, out.stdout[-2000:], out.stderr[-2000:])  # the budget, and the process's exit
    assert out.returncode == 1 and "no config was measured in time" in out.stdout, out.stdout[-2000:]
    with sqlite3.connect(tmp_path / "cut.db") as c:  # a cut trial says nothing about its config: not stored
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == 0


def test_the_tutorial_without_a_gpu_or_the_interpreter_says_what_to_set(tmp_path):
    """The tutorial imports Triton before autotuner: on a machine without a GPU, the interpreter that autotuner turns on
    then is turned on too late for Triton, and its kernels failed with an error naming nothing the user did."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDA_VISIBLE_DEVICES="", AUTOTUNER_DB_URL=f"sqlite:///{tmp_path / 't.db'}")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tutorial_matmul.py"), "--M", "64"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert "no CUDA device" in last and "TRITON_INTERPRET=1" in last, out.stderr[-3000:]
