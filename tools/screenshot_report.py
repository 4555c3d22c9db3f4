#!/usr/bin/env python3
"""Screenshots of a report.html in headless Chromium: the docs' pictures by a command.

    .venv/bin/python tools/screenshot_report.py runs/demo/report.html \\
        --out docs/report.png --out-episodes docs/report_episodes.png

The page is opened the way tests/report/test_browser.py opens it (tools/report_browser.py, beside this script):
a viewport of exactly --width x --height pixels, a wait until every chart is drawn, and a
failure listing the console errors if there are any, so a broken page never becomes a
picture. --out shows the top of the page, or --section scrolled to the top; --out-episodes
shows the before/after pairs. Selenium is imported only after the arguments are read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# tools/report_browser.py is imported as `tools.report_browser` (as the tests do), from the
# repository root: this script runs as a file, whose own folder is what Python puts first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The heading of the before/after pairs: report.js fills #pair-count and #pair-list below
# it, and the heading itself has no id.
EPISODES_SECTION = "h3:has(+ #pair-count)"

# Scroll to `arguments[0]`, an element id or else a CSS selector; return the page's section
# ids when nothing matches, or the selector's syntax error. A sticky bar stuck at the top
# (the episode filters) would hide the element: scroll back by what it covers.
SCROLL_JS = """
const s = arguments[0];
let e = document.getElementById(s);
if (!e) { try { e = document.querySelector(s); } catch (err) { return err.message; } }
if (!e) return [...document.querySelectorAll("h2[id], body > div[id]")].map(x => "#" + x.id);
e.scrollIntoView({block: "start"});
const stuck = [...document.querySelectorAll("body *")]
  .filter(x => getComputedStyle(x).position === "sticky" && x.getBoundingClientRect().top <= 0.5)
  .map(x => x.getBoundingClientRect().bottom);
window.scrollBy(0, -Math.max(0, ...stuck));
return null;
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="the report.html to render (arborl report writes it)")
    ap.add_argument("--out", type=Path, required=True, help="PNG of the page (top, or --section)")
    ap.add_argument(
        "--width", type=int, default=1280, help="viewport width in pixels (default 1280)"
    )
    ap.add_argument(
        "--height", type=int, default=900, help="viewport height in pixels (default 900)"
    )
    ap.add_argument(
        "--section",
        help="element id or CSS selector scrolled to the top before --out, e.g. sec-Rewards, "
        "episodes, '#pair-list' (default: the top of the page)",
    )
    ap.add_argument(
        "--out-episodes",
        type=Path,
        help=f"also a PNG of the before/after episode pairs ({EPISODES_SECTION})",
    )
    ap.add_argument(
        "--timeout", type=float, default=30, help="seconds to wait for the charts (default 30)"
    )
    return ap.parse_args(argv)


def scroll_to(driver, section: str) -> None:
    """Scroll `section` (id or CSS selector) to the top of the viewport, or raise naming the
    page's sections."""
    from tools.report_browser import BrowserError

    found = driver.execute_script(SCROLL_JS, section)
    if isinstance(found, str):
        raise BrowserError(f"--section {section!r} is not a valid CSS selector: {found}")
    if found is not None:
        raise BrowserError(
            f"no element matches --section {section!r}; the page has {', '.join(found)}"
        )


def shoot(driver, section: str | None, out: Path) -> None:
    """Scroll to `section` (or the top) and write the viewport to `out` as a PNG."""
    if section is None:
        driver.execute_script("window.scrollTo(0, 0)")
    else:
        scroll_to(driver, section)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(out)):
        raise OSError(f"Chromium could not write the screenshot {out}")
    print(f"wrote {out}")


def screenshot_report(driver, args: argparse.Namespace) -> None:
    """Open `args.report` in `driver`, check it drew without console errors, write the PNGs."""
    from tools.report_browser import BrowserError, console_errors, wait_until_drawn

    driver.get(args.report.resolve().as_uri())
    wait_until_drawn(driver, args.timeout)
    errors = console_errors(driver)
    if errors:
        listed = "\n  ".join(errors)
        raise BrowserError(f"{args.report} logs {len(errors)} console error(s):\n  {listed}")
    shoot(driver, args.section, args.out)
    if args.out_episodes:
        shoot(driver, EPISODES_SECTION, args.out_episodes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.report.is_file():
        raise SystemExit(
            f"error: {args.report} does not exist: write it first with "
            f"`arborl report RUN_DIR` (it writes RUN_DIR/report.html)"
        )
    from tools.report_browser import BrowserError, start_chromium

    try:
        driver = start_chromium(args.width, args.height)
        try:
            screenshot_report(driver, args)
        finally:
            driver.quit()
    except BrowserError as e:
        raise SystemExit(f"error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
