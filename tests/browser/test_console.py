"""The console in headless Chromium: log in, watch a queue fill and its producer stop, raise
the watermark and see the producer resume, purge the queue, run the wizard; and every page,
kept as a screenshot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
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


def _section(browser: WebDriver, title: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, f'section[data-title="{title}"]')


def _figure(browser: WebDriver, path: str) -> str:
    element = browser.find_element(By.CSS_SELECTOR, f'.figure[data-path="{path}"] .value')
    return str(element.text)


def _row(browser: WebDriver, section: str, first_cell: str) -> list[str]:
    """The cells of the row of a table whose first cell reads ``first_cell`` (read again if
    the page redraws the table while it is read)."""

    def cells_of_row(_: WebDriver) -> list[str]:
        for row in _section(browser, section).find_elements(By.CSS_SELECTOR, "tbody tr"):
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            if cells and cells[0] == first_cell:
                return cells
        return [""]  # not there: a list that is true, so that the wait ends

    found: list[str] = _wait(browser, cells_of_row)
    return found if found != [""] else []


def _headers(browser: WebDriver, section: str) -> list[str]:
    return [th.text for th in _section(browser, section).find_elements(By.TAG_NAME, "th")]


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
    assert browser.find_element(By.ID, "who").text == "ops (admin)"
    assert browser.find_element(By.ID, "note").get_attribute("hidden") is not None

    # a producer floods a queue nobody reads: it fills, and the producer stops
    flood = floods(server.port, "/queue/orders", limit=10**9)
    _open(browser, f"{base}/#/destination/{encoded('/queue/orders')}", "destination")
    _wait(browser, lambda b: _row(b, "Flow control", "VolQueueStore")[1] == "stopped")
    depth = int(_figure(browser, "messages").replace(",", ""))
    assert depth >= 100, "the queue filled"
    shoot("destination-full")
    _open(browser, f"{base}/#/connections", "connections")
    _wait(browser, lambda b: _row(b, "Connections", flood.session)[7] == "no")  # Reading
    producer = _row(browser, "Connections", flood.session)
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
        _wait(browser, lambda b, key=key: f"{key} = " in b.find_element(By.ID, "flash").text)
        assert "(in force now)" in browser.find_element(By.ID, "flash").text
    shoot("parameters-changed")
    _open(browser, f"{base}/#/connections", "connections")
    _wait(browser, lambda b: _row(b, "Connections", flood.session)[7] == "yes")
    _wait(browser, lambda b: flood.sent > stalled_at + 100)
    flood.close()

    # purge the queue from its page
    _open(browser, f"{base}/#/destination/{encoded('/queue/orders')}", "destination")
    before = int(_figure(browser, "messages").replace(",", ""))
    assert before > 0
    browser.find_element(By.CSS_SELECTOR, '.actions button[data-action="Purge"]').click()
    _wait(browser, expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()
    _wait(browser, lambda b: "purged" in b.find_element(By.ID, "flash").text)
    _wait(browser, lambda b: _figure(b, "messages") == "0")
    shoot("destination-purged")

    # the wizard: the manual's example gives the manual's table
    _open(browser, f"{base}/#/wizard", "wizard")
    assert browser.find_element(By.NAME, "heap_mb").get_attribute("value") == "256"
    browser.find_element(By.ID, "wizard-compute").click()
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#wizard-result tbody tr"))
    rows = {
        r.get_attribute("data-key"): r.find_elements(By.TAG_NAME, "td")[1].text
        for r in browser.find_elements(By.CSS_SELECTOR, "#wizard-result tbody tr")
    }
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
    note = browser.find_element(By.ID, "note")
    assert "127.0.0.1 only" in note.text, "an open console says so on every page"
    assert _figure(browser, "totals.connections") == "1"
    assert _figure(browser, "totals.received") == "3"
    assert "VolQueueStore" in _row(browser, "Watermarks", "VolQueueStore")[0]
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, ".chart svg polyline"))
    shoot("overview")

    _open(browser, f"{base}/#/destinations", "destinations")
    queue = _row(browser, "Queues", "/queue/work")
    assert queue[1] == "3" and queue[10] == "flowing"
    assert _row(browser, "Topics", "/topic/prices")[5] == "1"  # subscribers
    shoot("destinations")

    _open(browser, f"{base}/#/destination/{encoded('/queue/work')}", "destination")
    shoot("destination")
    messages = _section(browser, "Messages waiting (first 50)")
    bodies = [td.text for td in messages.find_elements(By.CSS_SELECTOR, "tbody tr td:nth-child(7)")]
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
    browser.find_element(By.CSS_SELECTOR, 'button[data-save="ClientEgress.maxdepth"]').click()
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-key="ClientEgress.maxdepth"]')
    _wait(browser, lambda b: "out of range" in row.find_element(By.CLASS_NAME, "error").text)
    shoot("parameters")
