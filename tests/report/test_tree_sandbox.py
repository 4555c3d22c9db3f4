"""A `trees/*.html` page cannot reach the report that embeds it (issue 34, review-2 defect
7: the iframe had no sandbox, so a page in a run folder ran script with the report's
origin and retitled it through `parent.document`)."""

from __future__ import annotations

from tests.report.test_browser import browser  # noqa: F401 (the Chromium fixture)

PAGE = """<html><body><p id="own">static</p><script>
document.getElementById("own").textContent = "ran";
try { parent.document.title = "PWNED"; } catch (e) { document.title = "blocked"; }
</script></body></html>"""


def test_a_tree_page_runs_its_own_script_but_not_in_the_report(browser, run_factory, tmp_path):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait

    from arborl.report import write_report

    run = run_factory(tmp_path, "r")
    (run / "trees").mkdir()
    (run / "trees" / "evil.html").write_text(PAGE)
    out = write_report([run])
    browser.get(out.resolve().as_uri())
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready")
    )
    title = browser.title
    frame = browser.find_element("css selector", "iframe.tree")
    assert frame.get_attribute("sandbox") == "allow-scripts"
    browser.switch_to.frame(frame)
    try:
        WebDriverWait(browser, 10).until(
            lambda d: d.find_element("id", "own").text == "ran"  # the tree view's own script
        )
        # parent.document threw: the frame has another origin (WebDriver's title is the
        # top page's, so ask the frame's document)
        assert browser.execute_script("return document.title") == "blocked"
    finally:
        browser.switch_to.default_content()
    assert browser.title == title != "PWNED"
