"""Debian's Chromium, headless, driven by selenium through Debian's chromedriver. Both paths are
given, so selenium never runs Selenium Manager (which would try to download a browser)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return (
                f"{path} is missing (scripts/install-lab-deps installs chromium, chromium-driver)"
            )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium WebDriver with its own throw-away profile, quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    with tempfile.TemporaryDirectory(prefix="gameday-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(
            options=options, service=Service(executable_path=str(CHROMEDRIVER))
        )
        try:
            yield driver
        finally:
            driver.quit()
