"""The explorer pages in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by selenium, with the network off.

Each page is opened from disk with every request refused (a proxy on a closed port, and the
DevTools ``Network.emulateNetworkConditions(offline=True)``); the performance log must show no
request other than the page's own file, and the browser log no SEVERE entry. Moving the slider
(arrow keys on the slider and on the page) must put the next step's transfers and buffer colours
in the DOM, as Python computes them (the schedule's transfers, the symbolic checker's
contributions) — for ring, tree and hierarchical schedules. One browser per module; the whole
module runs in well under a minute here. ``scripts/install_browser.sh`` installs the browser
(``make test`` calls it); without it these tests skip, saying why.
"""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

import ringccl
from ringccl.check import SymbolicState
from ringccl.cli import main
from ringccl.views.show import _ranges

pytest.importorskip("plotly", reason="the explorer needs plotly: pip install 'ringccl[explore]'")
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="browser tests need selenium: pip install 'ringccl[dev]'")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("browser tests need Chromium and its driver: run scripts/install_browser.sh "
                "(Debian packages chromium chromium-driver)", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", "--no-first-run",
                "--disable-background-networking", "--disable-component-update"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    yield driver
    driver.quit()


def _open(browser, path) -> float:
    """Open ``path``; check that nothing but the file was requested and nothing went wrong in
    the page's scripts. Returns the seconds the load took."""
    browser.get_log("performance")  # drop what came before
    browser.get_log("browser")
    t0 = time.perf_counter()
    browser.get(path.as_uri())
    browser.execute_script("return document.readyState")
    seconds = time.perf_counter() - t0
    urls = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    assert any(u.startswith("file://") for u in urls), urls  # the log sees the page itself
    leaving = [u for u in urls if not u.startswith(("file://", "data:", "blob:", "about:"))]
    assert not leaving, f"requests left the page: {leaving}"
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    return seconds


def test_a_request_leaving_the_page_is_caught(browser, tmp_path):
    page = tmp_path / "leaks.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://192.0.2.1/x.png">'
                    "</body></html>")
    with pytest.raises(AssertionError, match="requests left the page"):
        _open(browser, page)


def _dom(browser, k: int = 0) -> dict:
    """What explorer k shows, read from the DOM in one script call."""
    return browser.execute_script("""
        const s = document.querySelector('#explorer-' + arguments[0]);
        const st = s.querySelector('.state');
        const row = s.querySelector('tr.current');
        return {position: +st.dataset.position, step: +st.dataset.step,
                transfers: st.dataset.transfers ? st.dataset.transfers.split(',') : [],
                row: row ? +row.dataset.step : null,
                cells: Array.from(s.querySelectorAll('.chunk')).map(e =>
                  [+e.dataset.rank, +e.dataset.chunk, e.dataset.owners, e.dataset.color])};
    """, k)


def _expected(schedule, position: int, shown=None):
    """(transfers, {(rank, chunk): (owners, colour)}) Python computes for slider ``position``."""
    from ringccl.views.explore import owner_colors, transfer_text
    state = SymbolicState(schedule)
    for index in range(position):
        state.apply(index)
    transfers = ([] if position == 0 else
                 [transfer_text(*t[:4], bool(t.kind)) for t in
                  schedule.steps[position - 1].transfers()])
    n, c = schedule.world_size, schedule.num_chunks
    ranks = range(n) if shown is None else shown
    held = np.array([[r in set(state.ranks_in(rr, k).tolist()) for r in range(n)]
                     for rr in ranks for k in range(c)])
    colors = owner_colors(held)
    cells = {}
    for i, (rr, k) in enumerate((rr, k) for rr in ranks for k in range(c)):
        cells[rr, k] = (_ranges(state.ranks_in(rr, k).tolist()), colors[i])
    return transfers, cells


def _check(browser, schedule, position: int, k: int = 0):
    dom = _dom(browser, k)
    transfers, cells = _expected(schedule, position)
    assert dom["position"] == position and dom["step"] == position - 1
    assert dom["transfers"] == transfers
    assert dom["row"] == (position - 1 if position else None)
    got = {(r, c): (owners, color) for r, c, owners, color in dom["cells"]}
    assert got == cells


def _page(tmp_path, name, argv):
    path = tmp_path / name
    assert main(["explore"] + argv + ["-o", str(path)]) == 0
    return path


@pytest.mark.parametrize("argv, schedule, shape", [
    (["all_reduce", "-a", "ring", "-N", "4"],
     lambda: ringccl.schedule("all_reduce", "ring", world_size=4), "ring"),
    (["all_reduce", "-a", "tree", "-N", "7"],
     lambda: ringccl.schedule("all_reduce", "tree", world_size=7), "tree"),
    (["all_reduce", "-a", "hierarchical", "--topology", "2x4"],
     lambda: ringccl.schedule("all_reduce", "hierarchical", world_size=8, local_size=4),
     "nodes"),
])
def test_slider_moves_transfers_and_colours_to_the_next_step(browser, tmp_path, capsys, argv,
                                                             schedule, shape):
    path = _page(tmp_path, "p.html", argv)
    capsys.readouterr()
    _open(browser, path)
    s = schedule()
    section = browser.find_element(By.ID, "explorer-0")
    assert section.get_attribute("data-num-steps") == str(s.num_steps)
    assert f"{shape} layout" in section.find_element(By.TAG_NAME, "h2").text
    _check(browser, s, 0)
    slider = section.find_element(By.CSS_SELECTOR, ".slider")
    slider.send_keys(Keys.ARROW_RIGHT)  # the range input's own keys
    _check(browser, s, 1)
    slider.send_keys(Keys.ARROW_RIGHT)
    _check(browser, s, 2)
    before = _dom(browser)
    body = browser.find_element(By.TAG_NAME, "body")
    body.click()
    body.send_keys(Keys.END)  # the page's keys: the last step, then back one
    _check(browser, s, s.num_steps)
    body.send_keys(Keys.ARROW_LEFT)
    _check(browser, s, s.num_steps - 1)
    assert _dom(browser)["cells"] != before["cells"]
    body.send_keys(Keys.HOME)
    _check(browser, s, 0)


def test_play_advances_and_pauses(browser, tmp_path, capsys):
    path = _page(tmp_path, "play.html", ["all_reduce", "-a", "ring", "-N", "3"])
    _open(browser, path)
    play = browser.find_element(By.CSS_SELECTOR, "#explorer-0 .play")
    play.click()
    deadline = time.monotonic() + 20  # a wait, not a timing assertion
    while _dom(browser)["position"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    play.click()
    paused = _dom(browser)["position"]
    assert paused >= 2
    time.sleep(1.0)
    assert _dom(browser)["position"] == paused
    _check(browser, ringccl.schedule("all_reduce", "ring", world_size=3), paused)


def test_side_by_side_and_crossover_chart(browser, tmp_path, capsys):
    path = _page(tmp_path, "two.html", ["all_reduce", "-a", "ring,double_binary_tree",
                                        "-N", "8"])
    _open(browser, path)
    ring = ringccl.schedule("all_reduce", "ring", world_size=8)
    dbt = ringccl.schedule("all_reduce", "double_binary_tree", world_size=8)
    browser.find_element(By.CSS_SELECTOR, "#explorer-1 .slider").send_keys(Keys.ARROW_RIGHT)
    _check(browser, dbt, 1, k=1)
    _check(browser, ring, 0, k=0)  # the other explorer stays where it was
    traces = browser.execute_script(
        "return document.getElementById('model').data.map(t => t.name)")
    assert "ring" in traces and "double_binary_tree" in traces
    bars = browser.execute_script(
        "return document.getElementById('cost-0').data.reduce((n, t) => n + t.x.length, 0)")
    assert bars == ring.num_steps


def test_model_and_plan_pages_open_offline(browser, tmp_path, capsys):
    model = _page(tmp_path, "model.html", ["all_reduce", "--model", "-s", "4KiB:64MiB"])
    _open(browser, model)
    n = browser.execute_script("return document.getElementById('model').data.length")
    assert n >= 2 * len(ringccl.algorithms("all_reduce"))
    plan = tmp_path / "plan.html"
    assert main(["plan", "--model", "llama3-8b", "--dp", "2", "--tp", "2", "--pp", "2",
                 "--global-batch-size", "8", "--nodes", "1", "--html", str(plan)]) == 0
    _open(browser, plan)
    bars = browser.execute_script(
        "return document.getElementById('plan-timeline').data.length")
    assert bars > 0


def test_ring_of_256_ranks_loads(browser, tmp_path, capsys):
    """A 256-rank ring page stays usable: its size and load time are printed (no timed assert:
    they depend on the machine); one step is checked on a few ranks' buffers."""
    path = _page(tmp_path, "ring256.html", ["all_reduce", "-a", "ring", "-N", "256"])
    seconds = _open(browser, path)
    cells = browser.execute_script("return document.querySelectorAll('#explorer-0 .chunk')"
                                   ".length")
    assert cells == 256 * 256
    browser.find_element(By.CSS_SELECTOR, "#explorer-0 .slider").send_keys(Keys.ARROW_RIGHT)
    dom = _dom(browser)
    s = ringccl.schedule("all_reduce", "ring", world_size=256)
    transfers, want = _expected(s, 1, shown=[0, 1, 255])
    assert dom["transfers"] == transfers
    got = {(r, c): (o, col) for r, c, o, col in dom["cells"] if r in (0, 1, 255)}
    assert got == want
    print(f"\n256-rank ring page: {path.stat().st_size / 2**20:.1f} MiB, loaded in "
          f"{seconds:.2f} s")
