"""report.html in headless Chromium: find the browser and its driver, start a Selenium
webdriver with an exact viewport, wait until the page has drawn, read its console errors.

tests/report/test_browser.py and tools/screenshot_report.py both open the page through
here, so a screenshot for the docs is taken the way the test checks the page. It uses the
system Chromium (Debian's `chromium` and `chromium-driver`) and never downloads one;
Selenium (the `dev` extra) is imported only when a browser starts, so importing this
module costs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
APT = ["chromium", "chromium-driver"]

# report.js sets data-ready once the charts, episodes and trees are built; Plotly marks each
# chart div `js-plotly-plot` as it draws it, so a chart left without it was never drawn.
READY_JS = (
    "return document.body.dataset.ready === '1' && "
    "document.querySelectorAll('.chart:not(.js-plotly-plot)').length === 0"
)


class BrowserError(RuntimeError):
    """No browser to run, or a page that did not draw cleanly; the message says the fix."""


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name) or (
            f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
        )
        if path:
            return path
    return None


def _apt_install() -> None:
    """Debian's Chromium and driver; `apt-get update` only when the cached lists lack them."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *APT]
    if subprocess.run(install, env=env, capture_output=True).returncode == 0:
        return
    subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=True)
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BrowserError(f"`{' '.join(install)}` failed: {done.stderr[-2000:]}")


def locate_chromium(install: bool = False) -> tuple[str, str]:
    """(browser, driver) paths. `install`: when they are missing and we are root on a
    machine with apt-get, install Debian's packages first (the test does; a tool should not
    change the system unasked)."""
    browser, driver = _find(BROWSERS), _find(DRIVERS)
    if browser and driver:
        return browser, driver
    if not (install and os.geteuid() == 0 and shutil.which("apt-get")):
        missing = " and ".join(
            n for n, p in (("chromium", browser), ("chromedriver", driver)) if not p
        )
        raise BrowserError(
            f"{missing} not found: headless Chromium and its driver are needed. Run "
            f"`sudo apt-get install -y {' '.join(APT)}` (Debian/Ubuntu) or put `chromium` "
            "and `chromedriver` on PATH"
        )
    _apt_install()
    browser, driver = _find(BROWSERS), _find(DRIVERS)
    if not (browser and driver):
        raise BrowserError(f"installed {APT} but found no chromium/chromedriver on PATH")
    return browser, driver


def start_chromium(width: int = 1400, height: int = 1000, install: bool = False) -> Any:
    """A headless Chromium webdriver whose viewport is exactly `width` x `height` CSS pixels
    at scale 1 (a screenshot is that many pixels), with the console log kept."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise BrowserError(
            "selenium is missing: `pip install -e .[dev]` (it is in the dev extra) "
            "or `pip install selenium`"
        ) from None
    binary, driver_path = locate_chromium(install=install)
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    # --window-size sizes the window, and the viewport inside it comes out shorter (900
    # asked, 757 drawn on Chromium 150): set the viewport itself.
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.set_page_load_timeout(60)
    return driver


def console_errors(driver: Any) -> list[str]:
    """The SEVERE console messages logged since the last call (reading the log drains it)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_until_drawn(driver: Any, timeout_s: float = 30) -> None:
    """Wait until report.js has built the page and Plotly has drawn every chart; on timeout
    raise with the console errors, the usual reason."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout_s).until(lambda d: d.execute_script(READY_JS))
    except TimeoutException:
        errors = console_errors(driver)
        why = "; console errors: " + " | ".join(errors) if errors else " (no console errors)"
        raise BrowserError(
            f"{driver.current_url} was not drawn within {timeout_s:g} s: body[data-ready] unset "
            f"or a .chart without Plotly's js-plotly-plot{why}"
        ) from None
