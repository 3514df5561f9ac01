"""The report in a real browser: headless Chromium loads it offline, logs no console error or CSP
violation, draws every chart (each ``svg.chart`` gets a non-zero rendered size from the page's
hashed inline script), and takes a screenshot kept under out/test-artifacts/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from opslake_local.drain import Drainer
from opslake_local.report import build_report, write_report
from opslake_local.stack import LocalStack
from tests.integration.test_report import SUMMARY, engine_for, seed_ops, write_derived_tables

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-extensions",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")  # fmt: skip


def find_browser() -> str | None:
    """A Chromium or Chrome binary on PATH, else Playwright's Chromium if one is installed."""
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
    for pattern in (
        "chromium-*/chrome-linux/chrome",
        "chromium_headless_shell-*/chrome-linux/headless_shell",
    ):
        for candidate in sorted(cache.glob(pattern)):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


@pytest.fixture(scope="module")
def browser() -> str:
    found = find_browser()
    if found is None:
        pytest.skip(
            "no chromium/chrome found: install Debian's chromium (apt-get install chromium) to run this test"
        )
    return found


def run_browser(browser: str, *args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def console_problems(stderr: str) -> list[str]:
    """Console messages, uncaught errors and CSP refusals the page caused (browser noise ignored)."""
    return [
        line
        for line in stderr.splitlines()
        if re.search(r"CONSOLE|Uncaught|Refused to|Content Security Policy|ERR_BLOCKED", line)
    ]


def test_report_renders_every_chart_in_chromium(
    local: tuple[LocalStack, httpx.Client, Drainer], browser: str, tmp_path: Path
) -> None:
    stack, client, drainer = local
    seed_ops(stack, client, drainer)
    write_derived_tables(stack)
    html = build_report(engine_for(stack), summary=SUMMARY)
    charts = html.count('<svg class="chart"')
    assert charts >= 4
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = write_report(ARTIFACTS / "report.html", html)
    url = page.resolve().as_uri()

    dumped = run_browser(browser, "--dump-dom", url, profile=tmp_path / "profile-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    assert console_problems(dumped.stderr) == [], dumped.stderr[-2000:]
    dom = dumped.stdout
    assert f'data-charts="{charts}"' in dom, "the render marker script did not run (CSP hash mismatch?)"
    rendered = re.findall(r'<svg class="chart"[^>]*data-rendered="(\d+)x(\d+)"', dom)
    assert len(rendered) == charts
    assert all(int(w) > 100 and int(h) > 50 for w, h in rendered), rendered
    for chart in re.findall(r'<svg class="chart".*?</svg>', dom, re.S):
        assert re.search(r"<(polyline|rect class=\"bar\"|circle class=\"point\")", chart)

    screenshot = ARTIFACTS / "report.png"
    screenshot.unlink(missing_ok=True)
    shot = run_browser(
        browser,
        f"--screenshot={screenshot}",
        "--window-size=1280,2000",
        url,
        profile=tmp_path / "profile-png",
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert console_problems(shot.stderr) == [], shot.stderr[-2000:]
    data = screenshot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000  # a blank 1280x2000 page compresses to a few KB
