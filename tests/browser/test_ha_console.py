"""The console of an HA pair's nodes in headless Chromium: the overview's High availability
section shows the node's role, the lease's holder and the failover history, on a standby
(whose other sections cannot be answered) and on it again once it took over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.test_console import WAIT, _open, _section, _text, _wait
from tests.ha.conftest import database, postgres  # noqa: F401  (fixtures)
from tests.ha.pair import Pair

SECTION = _section("High availability")


@pytest.fixture
def pair(database: str, tmp_path: Path) -> Iterator[Pair]:  # noqa: F811
    started = Pair(tmp_path, database)
    try:
        started.start()
        yield started
    finally:
        started.close()


def _ha(browser: WebDriver, path: str) -> str:
    """A figure of the High availability section ("" while it is not drawn)."""
    return _text(browser, f'{SECTION} .figure[data-path="{path}"] .value')


def test_a_standby_shows_its_role_the_active_and_the_history_and_then_its_takeover(
    pair: Pair, browser: WebDriver, shoot
) -> None:
    active, standby = pair.nodes
    _open(browser, f"http://127.0.0.1:{standby.admin_port}/#/overview", "overview")
    _wait(browser, lambda b: _ha(b, "role") == "standby")
    assert _ha(browser, "node") == "b"
    assert _ha(browser, "active") == "a"
    assert _ha(browser, "history").endswith("epoch 1, a (first)")
    lease_left = float(_ha(browser, "lease_expires_in"))
    assert lease_left <= 4.0 and len(str(lease_left).split(".")[1]) <= 3
    # the sections only an active answers say why they cannot
    _wait(browser, lambda b: "a standby of its HA pair (the active: a)" in _text(b, "main"))
    shoot("standby")

    active.kill()
    pair.wait_active(standby)
    _wait(browser, lambda b: _ha(b, "role") == "active", timeout=WAIT * 2)
    assert _ha(browser, "active") == "b"
    assert _ha(browser, "reason") == "holder-gone"
    history = _ha(browser, "history")
    assert "epoch 2, b from a (holder-gone)" in history
    assert history.index("epoch 2") < history.index("epoch 1")  # newest first
    shoot("active")
