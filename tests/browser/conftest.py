"""Headless Chromium (Debian's chromium and chromium-driver, driven by Selenium), and a folder
for the screenshots each test keeps (test-artifacts/screenshots, ignored by git)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.browser.chromium import FLAGS
from tests.integration.conftest import floods, slow_clients  # noqa: F401  (fixtures)
from tests.integration.console import console, console_of  # noqa: F401  (fixtures)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    """One headless Chromium for the run, with a fresh profile."""
    profile = tempfile.mkdtemp(prefix="wiremq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shoot(browser: webdriver.Chrome, request: pytest.FixtureRequest):
    """``shoot(name)``: keep a screenshot of the page as it is now."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{request.node.name}-{name}.png"
        browser.save_screenshot(str(path))
        return path

    browser.delete_all_cookies()
    return take
