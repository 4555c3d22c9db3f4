"""report.html in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium.

The `browser` fixture finds the system Chromium; on a fresh machine where it is missing
and the user is root it installs it with apt-get, otherwise it fails saying what to
install (never a silent skip: a report nobody can open is a failure). Checked: no console
errors, every chart drawn with the expected number of series, the episode filters, and a
screenshot saved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
APT = ["chromium", "chromium-driver"]


def _find(names) -> str | None:
    for n in names:
        path = shutil.which(n) or (f"/usr/bin/{n}" if os.path.exists(f"/usr/bin/{n}") else None)
        if path:
            return path
    return None


def locate_chromium() -> tuple[str, str]:
    """(browser, driver) paths, installing Debian's packages first if they are missing."""
    browser, driver = _find(BROWSERS), _find(DRIVERS)
    if browser and driver:
        return browser, driver
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(
            "the browser test needs headless Chromium and its driver: run "
            f"`sudo apt-get install -y {' '.join(APT)}` (Debian/Ubuntu) or put `chromium` "
            "and `chromedriver` on PATH"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *APT]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"`{' '.join(install)}` failed: {done.stderr[-2000:]}")
    browser, driver = _find(BROWSERS), _find(DRIVERS)
    assert browser and driver, f"installed {APT} but found no chromium/chromedriver on PATH"
    return browser, driver


@pytest.fixture(scope="session")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: `pip install -e .[dev]` (it is in the dev extra)")
    binary, driver = locate_chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1400,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=opts, service=Service(driver))
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def _count(d, css: str) -> int:
    return d.execute_script(f"return document.querySelectorAll({css!r}).length")


def test_report_renders_and_filters_in_chromium(browser, runs, tmp_path) -> None:
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from arborl.report import write_report

    (runs[0] / "trees").mkdir()
    (runs[0] / "trees" / "t.html").write_text("<html><body><ul><li>root</li></ul></body></html>")
    out = write_report(list(runs), tmp_path / "cmp.html")
    html = out.read_text()
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
    browser.get(out.resolve().as_uri())
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready")
    )
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    # every chart drawn: one Plotly div each, with its traces as SVG groups
    assert _count(browser, ".chart.js-plotly-plot") == len(data["charts"])
    # held-out success: 2 runs + random + oracle (same env: drawn once)
    assert _count(browser, "#chart-success .scatterlayer .trace") == 4
    assert _count(browser, "#chart-m-training-success .scatterlayer .trace") == 2
    # 2 runs x (4 + 4 held-out + 1 training) episodes, one page of 20
    assert _count(browser, "#episode-list details.episode") == 18
    assert _count(browser, "#pair-list .pair") == 4  # 8 before/after pairs, 4 shown
    assert browser.find_element("id", "pair-count").text.startswith("4 of 8 tasks shown")
    sections = {c["section"] for c in data["charts"]}
    assert _count(browser, "#nav a") == len(sections) + 3  # + episodes, trees, config
    Select(browser.find_element("id", "f-outcome")).select_by_value("won")
    # won per run: t0 before; t0, t1 after; the training episode
    assert _count(browser, "#episode-list details.episode") == 8
    assert _count(browser, "#episode-list details.episode.lost") == 0
    Select(browser.find_element("id", "f-outcome")).select_by_value("all")
    Select(browser.find_element("id", "f-task")).select_by_value("t1")
    assert _count(browser, "#episode-list details.episode") == 4
    assert _count(browser, "#pair-list .pair") == 2  # t1 before/after, per run
    text = browser.find_element("id", "episode-count").text
    assert text.startswith("4 of 18 episodes")
    assert _count(browser, "iframe.tree") == 1  # search trees: the page embeds each view
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_hostile_text_and_non_finite_numbers_render_in_chromium(browser, tmp_path) -> None:
    """The review's blank pages: `<!--` ... `<script` in episode text and NaN / Infinity in
    a trajectory each left the page without charts or episodes."""
    from selenium.webdriver.support.ui import WebDriverWait

    from arborl.report import write_report
    from tests.report.conftest import HOSTILE_TEXT, make_hostile_run

    out = write_report([make_hostile_run(tmp_path)])
    browser.get(out.resolve().as_uri())
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready")
    )
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    assert _count(browser, "script") == 3  # the data block swallowed none of the scripts
    data = browser.execute_script("return JSON.parse(document.getElementById('report-data').text)")
    assert _count(browser, ".chart.js-plotly-plot") == len(data["charts"]) > 5
    assert _count(browser, "#episode-list details.episode") == 9  # 4 + 4 held-out, 1 training
    hostile = browser.find_element("css selector", "#episode-list details.episode")
    browser.execute_script("arguments[0].open = true", hostile)
    assert "return Infinity" in hostile.find_element("tag name", "summary").text
    cells = [c.get_attribute("textContent") for c in hostile.find_elements("css selector", "td")]
    assert HOSTILE_TEXT["observation"] in cells and HOSTILE_TEXT["action"] in cells
    assert HOSTILE_TEXT["response"] in cells and "NaN" in cells  # the reward, by name
    assert hostile.find_element("css selector", "p.instr").text == HOSTILE_TEXT["instruction"]
