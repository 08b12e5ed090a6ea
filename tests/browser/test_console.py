"""The console in headless Chromium: log in, watch a queue fill and its producer stop, raise
the watermark and see the producer resume, purge the queue, run the wizard; and every page,
kept as a screenshot.

The console redraws its sections every ``refresh_ms`` (admin/static/layout.json), replacing
their tables. A read made of several WebDriver calls (find the rows, then each cell's text)
can straddle a redraw and meet an element that is gone, more often the busier the machine.
So the page is read in one script per read (a script runs between two redraws, never across
one: ``_texts``, ``_table``), every wait reads the page again, and an element clicked is found
again if the page redrew it meanwhile (``_click``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.clients import connect, fill
from tests.integration.console import encoded, open_console
from wiremq.modules.security.users import UsersFile

WAIT = 15.0
WATERMARK = {
    "VolQueueStoreImpl.globalbytehighwatermark": "200000",
    "VolQueueStoreImpl.globalbytelowwatermark": "100000",
}


def _wait(browser: WebDriver, condition: Callable[[WebDriver], Any], timeout: float = WAIT) -> Any:
    """Wait for ``condition``; while the page redraws, what it looks for may be missing."""
    missing = (IndexError, NoSuchElementException, StaleElementReferenceException)
    waiting = WebDriverWait(browser, timeout, poll_frequency=0.1, ignored_exceptions=missing)
    return waiting.until(condition)


def _open(browser: WebDriver, url: str, page: str) -> None:
    browser.get(url)
    _wait(browser, lambda b: b.execute_script("return document.body.dataset.ready") == page)


def _texts(browser: WebDriver, css: str) -> list[str]:
    """The text of every element ``css`` selects, read at one instant."""
    texts: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText.trim());",
        css,
    )
    return texts


def _text(browser: WebDriver, css: str) -> str:
    """The text of the first element ``css`` selects ("" if there is none)."""
    found = _texts(browser, css)
    return found[0] if found else ""


def _section(title: str) -> str:
    return f'section[data-title="{title}"]'


def _figure(browser: WebDriver, path: str) -> str:
    return _text(browser, f'.figure[data-path="{path}"] .value')


def _table(browser: WebDriver, css: str) -> list[list[str]]:
    """The cells of every body row of the tables under ``css``, read at one instant."""
    rows: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map((row) =>"
        "  [...row.querySelectorAll('td')].map((cell) => cell.innerText.trim()));",
        css,
    )
    return rows


def _row(browser: WebDriver, section: str, first_cell: str) -> list[str]:
    """The cells of the row of a section's table whose first cell reads ``first_cell``
    ([] if there is none)."""
    return next((r for r in _table(browser, _section(section)) if r[:1] == [first_cell]), [])


def _headers(browser: WebDriver, section: str) -> list[str]:
    return _texts(browser, f"{_section(section)} th")


def _stopped(row: list[str]) -> list[str] | None:
    """A connection's row if it says its client is not read from (column Reading)."""
    return row if row[7] == "no" else None


def _click(browser: WebDriver, css: str) -> None:
    """Click the element ``css`` selects, found again if the page redraws it meanwhile."""
    _wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, css).click() or True)


def test_log_in_watch_a_producer_stop_and_resume_purge_and_run_the_wizard(
    reactor, start_server, floods, browser, shoot, tmp_path
):
    users = UsersFile(tmp_path / "data")
    users.set("ops", "s3cret", "admin")
    # The console needs the login; the STOMP producers and consumers here connect without one,
    # and may do anything.
    users.grant(None, "everyone", ">", ["read", "write", "create", "admin"])
    server = start_server(
        **WATERMARK, **{"Admin.sampleinterval": "0.5", "Security.allowanonymous": "true"}
    )
    api = open_console(reactor, server)
    base = f"http://127.0.0.1:{api.port}"

    # log in: a wrong password first
    browser.get(base + "/")
    _wait(browser, lambda b: b.current_url.endswith("/login"))
    browser.find_element(By.ID, "name").send_keys("ops")
    browser.find_element(By.ID, "password").send_keys("wrong")
    browser.find_element(By.ID, "submit").click()
    _wait(browser, lambda b: "Wrong user name or password" in b.page_source)
    shoot("login-refused")
    browser.find_element(By.ID, "name").send_keys("ops")
    browser.find_element(By.ID, "password").send_keys("s3cret")
    browser.find_element(By.ID, "submit").click()
    _wait(browser, lambda b: b.execute_script("return document.body.dataset.ready") == "overview")
    assert _text(browser, "#who") == "ops (admin)"
    assert browser.find_element(By.ID, "note").get_attribute("hidden") is not None

    # a producer floods a queue nobody reads: it fills, and the producer stops
    flood = floods(server.port, "/queue/orders", limit=10**9)
    _open(browser, f"{base}/#/destination/{encoded('/queue/orders')}", "destination")
    _wait(browser, lambda b: _row(b, "Flow control", "VolQueueStore")[1] == "stopped")
    depth = int(_figure(browser, "messages").replace(",", ""))
    assert depth >= 100, "the queue filled"
    shoot("destination-full")
    _open(browser, f"{base}/#/connections", "connections")
    producer = _wait(browser, lambda b: _stopped(_row(b, "Connections", flood.session)))
    assert "VolQueueStore" in producer[8]  # Stopped by
    assert flood.stalled()
    shoot("connections-producer-stopped")

    # raise the watermark from the parameters page (the high, then the low: only the low
    # starts a stopped producer again): the producer resumes
    stalled_at = flood.sent
    _open(browser, f"{base}/#/parameters", "parameters")
    for name, value in (
        ("globalbytehighwatermark", "1000000000"),
        ("globalbytelowwatermark", "900000000"),
    ):
        key = f"VolQueueStoreImpl.{name}"
        field = browser.find_element(By.NAME, key)
        field.clear()
        field.send_keys(value)
        browser.find_element(By.CSS_SELECTOR, f'button[data-save="{key}"]').click()
        _wait(browser, lambda b, key=key: f"{key} = " in _text(b, "#flash"))
        assert "(in force now)" in _text(browser, "#flash")
        # a save redraws the parameters: the next field is the one drawn after it
        _wait(browser, expected_conditions.staleness_of(field))
    shoot("parameters-changed")
    _open(browser, f"{base}/#/connections", "connections")
    _wait(browser, lambda b: _row(b, "Connections", flood.session)[7] == "yes")
    _wait(browser, lambda b: flood.sent > stalled_at + 100)
    flood.close()

    # purge the queue from its page
    _open(browser, f"{base}/#/destination/{encoded('/queue/orders')}", "destination")
    before = int(_figure(browser, "messages").replace(",", ""))
    assert before > 0
    _click(browser, '.actions button[data-action="Purge"]')
    _wait(browser, expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()
    _wait(browser, lambda b: "purged" in _text(b, "#flash"))
    _wait(browser, lambda b: _figure(b, "messages") == "0")
    shoot("destination-purged")

    # the wizard: the manual's example gives the manual's table
    _open(browser, f"{base}/#/wizard", "wizard")
    assert browser.find_element(By.NAME, "heap_mb").get_attribute("value") == "256"
    _click(browser, "#wizard-compute")
    _wait(browser, lambda b: _table(b, "#wizard-result"))
    rows: dict[str, str] = dict(
        browser.execute_script(
            "return [...document.querySelectorAll('#wizard-result tbody tr')].map((row) =>"
            "  [row.dataset.key, row.querySelectorAll('td')[1].innerText.trim()]);"
        )
    )
    assert rows["VolQueueStoreImpl.globalbytehighwatermark"] == "16,000,000"
    assert rows["QueueThreadPool.maxthreads"] == "4"
    assert rows["DestinationManager.globaltopicbytelowwatermark"] == "1,000,000"
    shoot("wizard")


def test_every_page_shows_what_the_api_answers(reactor, start_server, slow_clients, browser, shoot):
    server = start_server(**{"Admin.sampleinterval": "0.2"})
    api = open_console(reactor, server)
    base = f"http://127.0.0.1:{api.port}"
    fill(server.port, "/queue/work", ["a", "b", "c"], persistent="true")
    consumer, recorder = connect(server.port, **{"client-id": "shop"})
    consumer.subscribe("/topic/prices", id="p", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    session = api.get("/api/connections")["connections"][0]["session"]

    _open(browser, base + "/", "overview")
    assert "127.0.0.1 only" in _text(browser, "#note"), "an open console says so on every page"
    assert _figure(browser, "totals.connections") == "1"
    assert _figure(browser, "totals.received") == "3"
    assert "VolQueueStore" in _row(browser, "Watermarks", "VolQueueStore")[0]
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, ".chart svg polyline"))
    shoot("overview")

    _open(browser, f"{base}/#/destinations", "destinations")
    queue = _row(browser, "Queues", "/queue/work")
    assert queue[1] == "3" and queue[13] == "flowing"
    assert _row(browser, "Topics", "/topic/prices")[5] == "1"  # subscribers
    shoot("destinations")

    _open(browser, f"{base}/#/destination/{encoded('/queue/work')}", "destination")
    shoot("destination")
    bodies = [row[6] for row in _table(browser, _section("Messages waiting"))]
    assert bodies == ["a", "b", "c"]
    shoot("destination")

    _open(browser, f"{base}/#/connection/{encoded(session)}", "connection")
    assert _row(browser, "Consumers", "p")[1] == "/topic/prices"
    assert _row(browser, "Consumers", "p")[3] == "yes"  # ready
    assert _headers(browser, "Egress queues (show client stats queue)")[:7] == [
        "Queue",
        "Length (msgs)",
        "Length (work units)",
        "High water mark",
        "Max (work units)",
        "Discards (msgs)",
        "Delivered (msgs)",
    ]
    assert _row(browser, "Egress queues (show client stats queue)", "G-1")[4] == "20,000"
    shoot("connection")

    _open(browser, f"{base}/#/events", "events")
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '[data-event="client.connected"]'))
    other, _ = connect(server.port)  # appears without reloading the page
    before = len(browser.find_elements(By.CSS_SELECTOR, '[data-event="client.connected"]'))
    _wait(
        browser,
        lambda b: len(b.find_elements(By.CSS_SELECTOR, '[data-event="client.connected"]')) > before,
    )
    shoot("events")

    _open(browser, f"{base}/#/parameters", "parameters")
    field = browser.find_element(By.NAME, "ClientEgress.maxdepth")
    field.clear()
    field.send_keys("1")
    _click(browser, 'button[data-save="ClientEgress.maxdepth"]')
    error = 'tr[data-key="ClientEgress.maxdepth"] .error'
    _wait(browser, lambda b: "out of range" in _text(b, error))
    shoot("parameters")
