"""report.html in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium.

The `browser` fixture (tools/report_browser.py, shared with tools/screenshot_report.py)
finds the system Chromium; on a fresh machine where it is missing and the user is root it
installs it with apt-get, otherwise it fails saying what to install (never a silent skip:
a report nobody can open is a failure). Checked: no console errors, every chart drawn with
the expected number of series, the episode filters, a screenshot saved, and the
screenshot tool's PNGs and refusals.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def browser():
    from tools.report_browser import BrowserError, start_chromium

    try:
        d = start_chromium(1400, 1000, install=True)
    except BrowserError as e:
        pytest.fail(str(e))
    yield d
    d.quit()


def _count(d, css: str) -> int:
    return d.execute_script(f"return document.querySelectorAll({css!r}).length")


def test_report_renders_and_filters_in_chromium(browser, runs, tmp_path) -> None:
    from selenium.webdriver.support.ui import Select

    from arborl.report import write_report
    from tools.report_browser import console_errors, wait_until_drawn

    (runs[0] / "trees").mkdir()
    (runs[0] / "trees" / "t.html").write_text("<html><body><ul><li>root</li></ul></body></html>")
    out = write_report(list(runs), tmp_path / "cmp.html")
    html = out.read_text()
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))
    browser.get(out.resolve().as_uri())
    wait_until_drawn(browser)
    assert console_errors(browser) == []
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
    from arborl.report import write_report
    from tests.report.conftest import HOSTILE_TEXT, make_hostile_run
    from tools.report_browser import console_errors, wait_until_drawn

    out = write_report([make_hostile_run(tmp_path)])
    browser.get(out.resolve().as_uri())
    wait_until_drawn(browser)
    assert console_errors(browser) == []
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


def _load_tool():
    """tools/screenshot_report.py, a script outside the package, loaded by path."""
    path = Path(__file__).resolve().parents[2] / "tools" / "screenshot_report.py"
    spec = importlib.util.spec_from_file_location("screenshot_report", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_screenshot_tool_writes_pngs_of_the_asked_size(runs, tmp_path, capsys) -> None:
    from arborl.report import write_report

    tool = _load_tool()
    report = write_report(list(runs), tmp_path / "cmp.html")
    top, pairs = tmp_path / "shots" / "report.png", tmp_path / "shots" / "episodes.png"
    args = [str(report), "--out", str(top), "--out-episodes", str(pairs), "--width", "1000"]
    assert tool.main([*args, "--height", "700", "--section", "sec-Rewards"]) == 0
    assert _png_size(top) == _png_size(pairs) == (1000, 700)
    assert top.read_bytes() != pairs.read_bytes()  # two places on the page
    assert f"wrote {pairs}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"missing.html does not exist: write it first with "):
        tool.main([str(tmp_path / "missing.html"), "--out", str(top)])


def test_screenshot_tool_refuses_console_errors_and_unknown_sections(
    browser, runs, tmp_path
) -> None:
    """On the module's browser: the checks before a picture is written."""
    from arborl.report import write_report
    from tools.report_browser import BrowserError

    tool = _load_tool()
    report = write_report([runs[0]], tmp_path / "r.html")
    out = tmp_path / "r.png"
    args = tool.parse_args([str(report), "--out", str(out), "--section", "#nope"])
    with pytest.raises(BrowserError, match=r"no element matches --section '#nope'; the page has "):
        tool.screenshot_report(browser, args)
    # the pairs' heading ends up just under the sticky filter bar, not hidden by it
    tool.scroll_to(browser, tool.EPISODES_SECTION)
    heading, bar = (
        browser.execute_script(f"return document.querySelector({css!r}).getBoundingClientRect()")
        for css in (tool.EPISODES_SECTION, ".filters")
    )
    # (or lower on a short report: the page ended before the heading reached the top, and the
    # tool then stepped back by the bar's height)
    top, view, height = browser.execute_script(
        "return [window.scrollY, window.innerHeight, document.documentElement.scrollHeight]"
    )
    at_end = top + view + bar["height"] >= height - 1
    assert bar["top"] == 0 and bar["bottom"] - 1 <= heading["top"]  # never under the bar
    assert heading["top"] < bar["bottom"] + 5 or at_end, (heading, bar, top, view, height)
    broken = tmp_path / "broken.html"
    broken.write_text(
        report.read_text().replace("<h1>", "<script>throw Error('boom')</script><h1>", 1)
    )
    args = tool.parse_args([str(broken), "--out", str(out)])
    with pytest.raises(BrowserError, match=r"logs 1 console error\(s\):\n  .*Uncaught Error: boom"):
        tool.screenshot_report(browser, args)
    assert not out.exists()
