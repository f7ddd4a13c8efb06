"""The results pages in a real browser: Playwright driving Chromium against a real `autotuner serve`.

Chromium is the system's (Debian's `chromium` package; `.ci/run` installs it), or AUTOTUNER_CHROMIUM. Without
one these tests are reported as skipped, except where AUTOTUNER_REQUIRE_BROWSER=1 (CI), where that is a failure.
Screenshots of each page go to AUTOTUNER_SCREENSHOTS (docs/screenshots holds the README's), or a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
import pytest

from autotuner.base.device import current_device
from autotuner.base.registry import get_op
from autotuner.store.database import Store
from db import repository as repo
from db.engine import session_scope
from tests.support.devices import H100
from tests.support.server import running_server

EVIL = "<script>window.pwned=1</script>kernel"
KERNEL = "tests.support.decorated_kernels:scale_kernel"  # a decorated kernel: its problem is its key values and dtypes
MEASURED = [  # matmul configs and their times, in the order measured
    (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=3), 0.61),
    (dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3), 0.24),
    (dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4), 0.33),
    (dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3), 0.21),
    (dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=4, num_warps=4, num_stages=4), 0.29),
    (dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3), 0.22),
]
FAILED = [
    (dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=4), "out_of_resources",
     "out of resource: shared memory, required 262144, hardware limit 232448"),
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1, num_warps=1, num_stages=1), "wrong_result",
     "max error 0.31 (relative to max |ref|) exceeds tolerance 0.01"),
]


def _chromium() -> str | None:
    return os.environ.get("AUTOTUNER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def seed(url: str) -> dict[str, int]:
    """An H100 with a matmul run (measured, failed and rejected trials), softmax results, a decorated kernel's two
    keys and a kernel whose name and shape hold markup; the interpreter with a softmax result; one job in each
    state."""
    import tests.support.decorated_kernels  # noqa: F401  (registers the decorated kernel)

    store = Store(url)
    mm, sm = get_op("matmul"), get_op("softmax")
    mp = mm.parse_problem("4096x4096x4096")
    run = store.start_run(op=mm, problem=mp, device=H100, strategy="tpe", budget_trials=8, budget_seconds=None,
                          clock="cuda_events")
    for i, (config, ms) in enumerate(MEASURED):
        store.record_trial(run_id=run, config=config, config_key=f"m{i}", status="ok", median_ms=ms)
    for i, (config, status, error) in enumerate(FAILED):
        store.record_trial(run_id=run, config=config, config_key=f"f{i}", status=status, error=error)
    store.record_rejections(run_id=run, rejected=mm.space.enumerate(mp, H100).rejected)
    store.finish_run(run_id=run, status="done")
    store.save_best(op=mm, problem=mp, device=H100, config=MEASURED[3][0], median_ms=0.21, default_ms=0.61,
                    torch_ms=0.2, run_id=run)
    for shape, ms, torch_ms in (("8192x8192", 0.30, 0.45), ("1024x4096", 0.02, 0.031)):
        p = sm.parse_problem(shape)
        store.save_best(op=sm, problem=p, device=H100, config=sm.space.default(p, H100), median_ms=ms,
                        default_ms=ms * 1.3, torch_ms=torch_ms, run_id=None)
    ip = sm.parse_problem("64x200")
    store.save_best(op=sm, problem=ip, device=current_device(), config=sm.space.default(ip, current_device()),
                    median_ms=1.9, default_ms=2.0, torch_ms=0.5, run_id=None)
    with session_scope(store.engine) as s:
        repo.save_best(s, op=EVIL, problem_key="<b>1x2</b>", problem={"shape": "<b>1x2</b>", "dtype": "float16"},
                       device_id=store.device_id(H100), kernel_hash="x", triton_version="3.6.0",
                       config={"BLOCK": 128, "num_warps": 4}, median_ms=0.5, default_ms=0.7, torch_ms=None,
                       run_id=None)
    kernel = get_op(KERNEL)
    for n in (4096, 1 << 20):
        kp = kernel.parse_problem(f"n={n}", "float32")
        store.save_best(op=kernel, problem=kp, device=H100, config={"BLOCK": 128, "num_warps": 4, "num_stages": 3},
                        median_ms=0.01 * n / 4096, default_ms=0.02 * n / 4096, torch_ms=None, run_id=None)
    sweep = store.create_sweep(op="matmul", dtype="float16", options={"epilogue": "none"}, dim="M",
                               shapes=[f"{m}x4096x4096" for m in (256, 512, 1024)], target=0.05, budget=2)
    keys = [f"{m}x4096x4096:float16" for m in (256, 512, 1024, 362)]
    cells = [dict(winner_key=keys[i], on_key=keys[j], config=MEASURED[i][0], ms=loss, own_ms=1.0)
             for i, j, loss in ((0, 0, 1.0), (0, 1, 1.02), (1, 0, 1.05), (1, 1, 1.0), (1, 2, 1.12), (2, 1, 1.4),
                                (2, 2, 1.0))]
    cells[4]["ms"] = None  # not valid there
    store.save_cross_timings(sweep_id=sweep, op=mm, device=H100, cells=cells)
    # refinement added M=362 between 256 and 512 (their winners lost 2% and 5% on each other): timed with them
    store.add_sweep_points(sweep, shapes=[f"{m}x4096x4096" for m in (256, 362, 512, 1024)], added=["362x4096x4096"])
    store.save_cross_timings(sweep_id=sweep, op=mm, device=H100, cells=[
        dict(winner_key=keys[i], on_key=keys[j], config=MEASURED[i][0], ms=loss, own_ms=1.0)
        for i, j, loss in ((3, 0, 1.005), (0, 3, 1.02), (3, 3, 1.0), (3, 1, 1.02), (1, 3, 1.06))])
    jobs = {}
    for name in ("done", "failed", "running", "queued"):
        jobs[name] = store.queue_job(op="softmax" if name != "queued" else EVIL, shape="256x1024",
                                     dtype="float16", options={})
        if name == "queued":
            continue
        job, _ = store.claim_job(f"gpu-worker-{name}")
        assert job is not None and job.id == jobs[name]
        if name == "done":
            store.finish_job(job_id=job.id, worker=f"gpu-worker-{name}", run_id=run)
        elif name == "failed":
            store.fail_attempt(job_id=job.id, worker=f"gpu-worker-{name}", max_attempts=1,
                               error="CUDA out of memory: the problem needs 14.4 GB", permanent=True)
    return {"result": next(r.id for r in store.results(op="matmul")), "sweep": sweep, **jobs}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A served database (no token: the pages need none) and Chromium; the database's URL and the ids seeded."""
    url = f"sqlite:///{tmp_path_factory.mktemp('pages') / 'r.db'}"
    seeded = seed(url)
    with running_server(url, AUTOTUNER_PLUGINS="tests.support.decorated_kernels") as client:
        yield str(client.base_url), url, seeded


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        message = ("no Chromium found: install Debian's `chromium` package (apt-get install chromium) or set "
                   "AUTOTUNER_CHROMIUM to a Chromium binary")
        if os.environ.get("AUTOTUNER_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, site):
    """A laptop-sized page that records every URL it requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.requested = []  # type: ignore[attr-defined]
    pg.on("request", lambda r: pg.requested.append(r.url))  # type: ignore[attr-defined]
    yield pg
    context.close()


def shot(pg, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("AUTOTUNER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    assert (folder / f"{name}.png").stat().st_size > 10_000


def _column(pg, table, n: int) -> list[str]:
    return [c.strip() for c in pg.locator(f"{table} tbody tr td:nth-child({n})").all_inner_texts()]


def test_overview_shows_the_stored_values_sorted_and_filtered(page, site, tmp_path):
    base, _, seeded = site
    page.goto(base + "/")
    h100 = page.locator("section.device[data-device*='H100']")
    row = h100.locator(f"tr[data-result='{seeded['result']}']")
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    # op, shape, dtype, config, time, vs default, vs torch, roofline, state, when: as stored
    assert cells[:3] == ["matmul", "4096x4096x4096", "float16"]
    assert "BLOCK_M=128 BLOCK_N=256 BLOCK_K=64" in cells[3]
    assert cells[4:7] == ["0.21", "2.90x", "0.95x"]
    # 2*4096^3 flop in 0.21 ms on a 989 TFLOP/s datasheet peak
    assert cells[7] == f"{2 * 4096**3 / 989e12 / 0.21e-3:.0%}" and cells[8] == "current"
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", cells[9])
    interp = page.locator(f"section.device[data-device='{current_device().key}'] tbody tr")
    assert interp.count() == 1
    # the interpreter's times are CPU wall-clock: no ratio against torch, as the command line says
    assert [c.strip() for c in interp.locator("td").all_inner_texts()][5:7] == ["1.05x", ""]
    kernel = h100.locator("tbody tr", has_text=KERNEL).first
    assert [c.strip() for c in kernel.locator("td").all_inner_texts()][1:3] == ["n=1048576", "float32"]
    assert kernel.locator("td.op span.library").inner_text() == "tests"  # the kernel's library, beside its name
    assert h100.locator("tbody tr", has_text="matmul").first.locator("span.library").count() == 0
    # the sweep's cross timings as a heat map: a row per winner, a column per point, each cell its loss there
    heat = h100.locator(f"#sweep-{seeded['sweep']}")
    assert heat.locator("g.cell").count() == 12
    # the point refinement added drawn in its place along M, marked; the worst neighbouring pair against the target
    assert heat.locator("text.tick").all_text_contents() == ["256", "362*", "512", "1024"] * 2
    assert [heat.locator(f"g.{level}").count()
            for level in ("heat-own", "heat-0", "heat-1", "heat-2", "heat-4", "heat-na")] == [4, 1, 3, 2, 1, 1]
    assert "+40.0% against 512x4096x4096:float16's own winner" in heat.locator("g.heat-4 title").text_content()
    caption = heat.locator("figcaption").inner_text()
    assert "Points marked * were added by refinement (1 of at most 2)" in caption
    assert "Worst neighbouring pair 512 / 1024: the better winner loses +40.0% on the other's point, above the " \
           "5.0% target" in caption
    # at a laptop's width the table fits: no horizontal scrolling, in its box or on the page
    box = h100.locator("div.scroll")
    assert box.evaluate("b => b.scrollWidth <= b.clientWidth"), box.evaluate("b => [b.scrollWidth, b.clientWidth]")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # the report's chart: three bars per GPU problem (the kernels with no torch time against their default config);
    # the interpreter's result left out
    assert h100.locator("rect.bar-tuned").count() == 6 and h100.locator("rect.bar-torch").count() == 6
    assert "1 result timed by the interpreter" in page.inner_text("main")
    shot(page, "results", tmp_path)

    page.click("section.device[data-device*='H100'] th a:has-text('time (ms)')")  # sort by time, descending
    page.wait_for_url(re.compile(r"sort=time"))
    times = [float(t) for t in _column(page, "section.device[data-device*='H100'] table.results", 5)]
    assert times == sorted(times, reverse=True) and len(times) == 6
    page.click("section.device[data-device*='H100'] th a:has-text('time (ms)')")  # again: ascending
    page.wait_for_url(re.compile(r"order=asc"))
    times = [float(t) for t in _column(page, "section.device[data-device*='H100'] table.results", 5)]
    assert times == sorted(times)

    page.select_option("select#op", "softmax")
    page.click("form.filter button")
    page.wait_for_url(re.compile(r"op=softmax"))
    ops = _column(page, "table.results", 1)
    assert set(ops) == {"softmax"} and len(ops) == 3
    assert all(u.startswith(base) for u in page.requested), page.requested  # no CDN, nothing from outside


def test_markup_in_a_kernel_name_is_shown_as_text(page, site):
    base, _, _ = site
    for path in ("/", "/ui/queue"):
        page.goto(base + path)
        assert EVIL in page.inner_text("main")
        assert page.evaluate("window.pwned") is None  # the script never ran
        assert page.locator("main script").count() == 0
    page.goto(base + "/")
    assert "<b>1x2</b>" in page.inner_text("main") and page.locator("main b:text-is('1x2')").count() == 0


def test_result_page_draws_every_measured_trial(page, site, tmp_path):
    base, _, seeded = site
    page.goto(f"{base}/ui/results/{seeded['result']}")
    chart = page.locator("#trials-chart")
    assert chart.locator("circle.trial").count() == len(MEASURED)
    assert chart.locator("g.failed").count() == len(FAILED)
    # the best-so-far line steps down at each new best: 0.61, 0.24, 0.21
    assert chart.locator("polyline.best").count() == 1
    ys = [float(c.get_attribute("cy")) for c in chart.locator("circle.trial").all()]
    assert ys.index(max(ys)) == [ms for _, ms in MEASURED].index(min(ms for _, ms in MEASURED))  # fastest lowest
    counts = page.inner_text("#trial-counts")
    rejected = get_op("matmul").space.enumerate(get_op("matmul").parse_problem("4096x4096x4096"), H100).rejected
    assert counts == f"{len(MEASURED)} measured · {len(FAILED)} failed · {len(rejected)} rejected by the space's " \
                     "constraints"
    by_rule = page.locator("ul.rejections li").all_inner_texts()
    assert any(r.startswith(f"{sum('fits_smem' in x.rules for x in rejected)} fits_smem: e.g. shared memory")
               for r in by_rule), by_rule
    rows = page.locator("table.trials tbody tr")
    assert rows.count() == len(MEASURED) + len(FAILED)
    assert page.locator("table.trials tr.winner").count() == 1
    assert "out of resource: shared memory" in page.inner_text("table.trials")
    assert page.inner_text("#triton-config").startswith("triton.Config({'BLOCK_M': 128, 'BLOCK_N': 256")
    assert "num_warps=8, num_stages=3" in page.inner_text("#triton-config")
    assert "autotuner.matmul(a, b" in page.inner_text("#call")
    shot(page, "result", tmp_path)
    # time against a chosen parameter: one column per value, a dot per measured trial
    page.select_option("select#param", "BLOCK_N")
    page.click("button:has-text('draw')")
    page.wait_for_url(re.compile(r"param=BLOCK_N"))
    param = page.locator("#param-chart")
    assert param.locator("circle.param").count() == len(MEASURED)
    assert param.locator("text.tick").all_text_contents()[-3:] == ["64", "128", "256"]
    assert all(u.startswith(base) for u in page.requested)


def test_queue_changes_without_a_reload_when_a_job_finishes(page, site, tmp_path):
    base, url, seeded = site
    page.goto(base + "/ui/queue")
    for state in ("queued", "running", "done", "failed"):
        assert page.locator(f"#jobs-{state} tr[data-job='{seeded[state]}']").count() == 1, state
    running = page.locator(f"#jobs-running tr[data-job='{seeded['running']}']").inner_text()
    assert "gpu-worker-running" in running and re.search(r"\d+ s ago", running)
    assert "14.4 GB" in page.inner_text("#jobs-failed")
    done = page.locator(f"#jobs-done tr[data-job='{seeded['done']}'] a")
    assert done.get_attribute("href") == f"/ui/results/{seeded['result']}"
    shot(page, "queue", tmp_path)

    page.evaluate("window.notReloaded = true")
    assert Store(url).finish_job(job_id=seeded["running"], worker="gpu-worker-running", run_id=None)
    page.locator(f"#jobs-done tr[data-job='{seeded['running']}']").wait_for(timeout=10_000)
    assert page.locator(f"#jobs-running tr[data-job='{seeded['running']}']").count() == 0
    assert page.evaluate("window.notReloaded") is True


def test_pages_read_well_on_a_phone(browser, site, tmp_path):
    base, _, seeded = site
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    pg = context.new_page()
    try:
        for path, name in (("/", "results-phone"), (f"/ui/results/{seeded['result']}", None), ("/ui/queue", None)):
            pg.goto(base + path)
            # wide tables scroll inside their box; the page itself never scrolls sideways
            assert pg.evaluate("document.documentElement.scrollWidth") <= 390, path
            if name:
                shot(pg, name, tmp_path)
    finally:
        context.close()


def test_pages_answer_plainly_for_missing_things_and_write_nothing(site):
    base, _, _ = site
    client = httpx.Client(base_url=base, timeout=10)
    missing = client.get("/ui/results/999999")
    assert missing.status_code == 404 and "There is no result with id 999999" in missing.text
    assert client.get("/ui/results/0").status_code == 422
    odd = client.get("/", params={"sort": "nonsense", "order": "sideways"})
    assert odd.status_code == 200 and "Tuned results" in odd.text
    for path in ("/", "/ui/queue"):
        assert client.post(path).status_code == 405
        assert 'method="post"' not in client.get(path).text.lower()
    paths = client.get("/openapi.json").json()["paths"]
    assert not any(p == "/" or p.startswith("/ui") for p in paths)  # pages are not part of the API


def test_a_result_page_says_when_the_library_call_launches_torchs_op(site):
    """The seeded matmul's tune timed cuBLAS at 0.20 ms against its config's 0.21: its library call launches
    torch's op, and its page says so; a softmax result that beat torch says nothing of it."""
    base, _, _ = site
    client = httpx.Client(base_url=base, timeout=10)
    ids = {r["problem_key"]: r["id"] for r in client.get("/results", params={"limit": 200}).json()["items"]}
    matmul = client.get(f"/ui/results/{ids['4096x4096x4096:float16']}").text
    assert 'id="launches-torch"' in matmul and "0.2 ms against 0.21 ms" in matmul
    softmax = client.get(f"/ui/results/{ids['8192x8192:float16']}").text
    assert "How to launch with it" in softmax and 'id="launches-torch"' not in softmax


def test_pages_say_when_the_database_is_down(tmp_path):
    dead = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1"
    with running_server(dead) as client:
        for path in ("/", "/ui/results/1", "/ui/queue"):
            r = client.get(path)
            assert r.status_code == 503 and "database is unavailable" in r.text, path
            assert "127.0.0.1" not in r.text and "psycopg" not in r.text


@pytest.mark.postgres
def test_pages_on_postgres(pg_url):
    """The same queries on PostgreSQL: every page renders the seeded rows."""
    seeded = seed(pg_url)
    with running_server(pg_url) as client:
        index = client.get("/")
        assert index.status_code == 200 and "4096x4096x4096" in index.text
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in index.text and EVIL not in index.text
        result = client.get(f"/ui/results/{seeded['result']}")
        assert result.status_code == 200 and result.text.count('class="mark trial"') == len(MEASURED)
        queue = client.get("/ui/queue/rows")
        assert queue.status_code == 200 and f'data-job="{seeded["failed"]}"' in queue.text

