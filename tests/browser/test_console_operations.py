"""The operator's day in the console, in headless Chromium, as an admin, an operator and a
viewer: paging, sorting and filtering 10,000 destinations; making one with its parameters;
publishing a test message and reading its life story; moving a message by searching for
where it goes; shutting down and resuming; removing a durable subscription; managing users;
browsing a queue page by page with a selector, opening one message, copying one.

Every wait re-reads the page (the tables redraw every two seconds): no element is held across
a wait."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions

from tests.browser.test_console import _open, _wait
from tests.conftest import call_in_reactor
from tests.integration.clients import connect, fill
from tests.integration.console import encoded, open_console
from wiremq.config.groups import ServerSettings
from wiremq.modules.security.users import UsersFile

PASSWORDS = {"boss": "boss-pw", "ops": "ops-pw", "eye": "eye-pw"}


def _users(data) -> UsersFile:
    """An admin, an operator and a viewer; the STOMP clients of the tests need no login."""
    users = UsersFile(data)
    users.set("boss", PASSWORDS["boss"], "admin")
    users.set("ops", PASSWORDS["ops"], "operator")
    users.grant("ops", None, ">", ["admin"])
    users.set("eye", PASSWORDS["eye"], "viewer")
    users.grant("eye", None, ">", ["read"])
    users.grant(None, "anonymous", ">", ["read", "write", "create"])
    return users


def _log_in(browser: WebDriver, base: str, name: str) -> None:
    browser.delete_all_cookies()
    browser.get(base + "/login")
    browser.find_element(By.ID, "name").send_keys(name)
    browser.find_element(By.ID, "password").send_keys(PASSWORDS[name])
    browser.find_element(By.ID, "submit").click()
    _wait(browser, lambda b: b.execute_script("return document.body.dataset.ready") == "overview")


def _texts(browser: WebDriver, css: str) -> list[str]:
    """The text of everything ``css`` finds, read in one step of the page (a redraw cannot
    come between two of them)."""
    found = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())", css
    )
    return [str(text) for text in found]


def _text(browser: WebDriver, css: str) -> str:
    found = _texts(browser, css)
    return found[0] if found else ""


def _attributes(browser: WebDriver, css: str, name: str) -> list[str]:
    found = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => e.getAttribute(arguments[1]))",
        css,
        name,
    )
    return [str(value) for value in found]


def _column(browser: WebDriver, section: str, n: int) -> list[str]:
    """The ``n``th cells (from 1) of a section's table, read at once."""
    return _texts(browser, f'section[data-title="{section}"] tbody tr td:nth-child({n})')


def _click(browser: WebDriver, css: str) -> None:
    """Click what ``css`` finds, found again if the page redrew it meanwhile."""

    def clicked(b: WebDriver) -> bool:
        b.find_element(By.CSS_SELECTOR, css).click()
        return True

    _wait(browser, clicked)


def _type(browser: WebDriver, css: str, text: str) -> None:
    """Type into what ``css`` finds, found again if the page redrew it meanwhile."""

    def typed(b: WebDriver) -> bool:
        b.find_element(By.CSS_SELECTOR, css).send_keys(text)
        return True

    _wait(browser, typed)


def _until(browser: WebDriver, condition: Callable[[WebDriver], Any]) -> Any:
    return _wait(browser, condition)


def _accept(browser: WebDriver) -> None:
    _wait(browser, expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()


def _actions(browser: WebDriver) -> list[str]:
    return _texts(browser, 'section[data-section="actions"] button')


def test_ten_thousand_destinations_come_one_page_at_a_time(reactor, start_server, browser, shoot):
    server = start_server()
    api = open_console(reactor, server)
    base = f"http://127.0.0.1:{api.port}"

    def make() -> None:
        for n in range(10_000):
            server.core.destinations.resolve(f"/queue/q{n:05d}")

    call_in_reactor(reactor, make)
    fill(server.port, "/queue/q04242", ["a", "b", "c"])
    _open(browser, f"{base}/#/destinations", "destinations")
    queues = 'section[data-title="Queues"]'
    _until(browser, lambda b: _text(b, f"{queues} .range") == "1–50 of 10,000")
    assert len(_column(browser, "Queues", 1)) == 50
    assert _column(browser, "Queues", 1)[0] == "/queue/q00000"
    shoot("first-page")
    _click(browser, f'{queues} button[data-page="next"]')
    _until(browser, lambda b: _column(b, "Queues", 1)[0] == "/queue/q00050")
    assert _text(browser, f"{queues} .range") == "51–100 of 10,000"
    _click(browser, f'{queues} th[data-sort="messages"]')  # most first
    _until(browser, lambda b: _column(b, "Queues", 1)[0] == "/queue/q04242")
    assert _column(browser, "Queues", 2)[0] == "3"
    assert _text(browser, f"{queues} .range") == "1–50 of 10,000", "a new sort starts over"
    _click(browser, f'{queues} th[data-sort="name"]')
    _type(browser, f"{queues} .table-filter", "q0424")
    _until(browser, lambda b: _text(b, f"{queues} .range") == "1–10 of 10 (filtered from 10,000)")
    assert _column(browser, "Queues", 1) == [f"/queue/q0424{n}" for n in range(10)]
    shoot("filtered")
    # the page never fetched the whole table: every request asked for one page
    requests = browser.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('/api/destinations?'))"
        ".map(e => [e.name, e.transferSize])"
    )
    assert requests and all("limit=50" in url for url, _ in requests)
    assert max(size for _, size in requests) < 100_000, requests


def test_an_admin_makes_a_destination_publishes_and_reads_the_story(
    reactor, start_server, browser, shoot, tmp_path
):
    _users(tmp_path / "data")
    server = start_server(**{"Security.allowanonymous": "true"})
    base = f"http://127.0.0.1:{open_console(reactor, server).port}"
    _log_in(browser, base, "boss")
    assert "Users" in _texts(browser, "#nav a")
    _open(browser, f"{base}/#/destinations", "destinations")
    _type(browser, 'input[name="name"]', "/queue/made")  # the form is never redrawn
    _click(browser, "details summary")
    ttl = 'tr[data-key="maxttl"] input'
    browser.find_element(By.CSS_SELECTOR, ttl).clear()
    _type(browser, ttl, "60000")
    _click(browser, 'button[data-action="create"]')
    _until(
        browser, lambda b: b.execute_script("return document.body.dataset.ready") == "destination"
    )
    assert _text(browser, "h1") == "Destination /queue/made"
    assert "Made /queue/made" in _text(browser, "#flash")
    shoot("made")

    _type(browser, 'textarea[name="headers"]', "color: red")
    _type(browser, 'textarea[name="body"]', "hello from the console")
    _click(browser, 'input[name="persistent"]')
    _click(browser, 'button[data-action="publish"]')
    _until(browser, lambda b: "Published" in _text(b, ".form-result"))
    message_id = _text(browser, ".form-result a")
    assert message_id.startswith("wmq-") and "(stored)" in _text(browser, ".form-result")
    waiting = 'section[data-title="Messages waiting"]'
    _until(browser, lambda b: _column(b, "Messages waiting", 1) == [message_id])
    assert "color:red" in _column(browser, "Messages waiting", 6)[0]
    shoot("published")
    _click(browser, f'{waiting} tbody a[href^="#/story/"]')
    _until(browser, lambda b: b.execute_script("return document.body.dataset.ready") == "story")
    _until(
        browser, lambda b: _texts(b, "table.story tbody td:nth-child(2)") == ["received", "stored"]
    )
    assert _texts(browser, "table.story tbody td:nth-child(3)") == ["/queue/made"] * 2
    assert "2 records in" in _text(browser, "#story-summary")
    shoot("story")
    # pasted into the box of the story page
    _open(browser, f"{base}/#/story", "story")
    _type(browser, 'input[name="message-id"]', message_id)
    _click(browser, 'button[data-action="look-up"]')
    _until(browser, lambda b: len(_texts(b, "table.story tbody tr")) == 2)
    assert _config_declares(server, "/queue/made")

    # delete it (the admin's): purged, removed, no longer declared
    _open(browser, f"{base}/#/destination/{encoded('/queue/made')}", "destination")
    _click(browser, 'section[data-section="actions"] button[data-action="Delete"]')
    _accept(browser)
    _until(
        browser, lambda b: b.execute_script("return document.body.dataset.ready") == "destinations"
    )
    assert '"purged" 1' in _text(browser, "#flash") or "purged 1" in _text(browser, "#flash")
    assert "/queue/made" not in server.core.destinations.queues
    assert not _config_declares(server, "/queue/made")


def _config_declares(server, name: str) -> bool:
    config = Path(ServerSettings.read(server.settings, "Server").datadir) / "config.xml"
    return any(
        e.get("name") == name and e.get("declared") == "true"
        for e in ElementTree.parse(config).getroot().iter("Destination")
    )


def test_an_operator_moves_by_searching_shuts_down_resumes_and_removes_a_subscription(
    reactor, start_server, browser, shoot, tmp_path
):
    _users(tmp_path / "data")
    server = start_server(**{"Security.allowanonymous": "true"})
    base = f"http://127.0.0.1:{open_console(reactor, server).port}"
    fill(server.port, "/queue/src", ["to be moved"])
    fill(server.port, "/queue/dst.eu", ["already there"])
    fill(server.port, "/queue/dst.us", ["also"])
    _log_in(browser, base, "ops")
    assert "Users" not in _texts(browser, "#nav a")
    _open(browser, f"{base}/#/destinations", "destinations")
    assert _texts(browser, 'button[data-action="create"]') == []

    _open(browser, f"{base}/#/destination/{encoded('/queue/src')}", "destination")
    waiting = "Messages waiting"
    _until(browser, lambda b: _column(b, waiting, 7) == ["to be moved"])
    _click(browser, 'section[data-title="Messages waiting"] button[data-action="Move"]')
    _type(browser, "#choose-filter", "dst.u")
    _until(browser, lambda b: _attributes(b, ".choice", "data-destination") == ["/queue/dst.us"])
    shoot("choosing")
    _click(browser, '.choice[data-destination="/queue/dst.us"]')
    _click(browser, '.dialog button[data-action="confirm"]')
    _until(browser, lambda b: "Move:" in _text(b, "#flash"))
    assert 'to "/queue/dst.us"' in _text(browser, "#flash")
    _until(browser, lambda b: "no message waits" in _text(b, f'section[data-title="{waiting}"]'))

    # an operator publishes too
    _type(browser, 'textarea[name="body"]', "from the operator")
    _click(browser, 'button[data-action="publish"]')
    _until(browser, lambda b: "Published" in _text(b, ".form-result"))
    _until(browser, lambda b: _column(b, waiting, 7) == ["from the operator"])

    # Shut down / Resume: only the action that applies
    assert "Shut down" in _actions(browser) and "Resume" not in _actions(browser)
    assert "Delete" not in _actions(browser), "deleting is the admin's"
    _click(browser, 'section[data-section="actions"] button[data-action="Shut down"]')
    _accept(browser)
    _until(browser, lambda b: "Resume" in _actions(b) and "Shut down" not in _actions(b))
    shoot("shut-down")
    _click(browser, 'section[data-section="actions"] button[data-action="Resume"]')
    _until(browser, lambda b: "Shut down" in _actions(b) and "Resume" not in _actions(b))

    # a topic's durable subscriptions: the one not connected may be removed
    gone, recorder = connect(server.port, **{"client-id": "shop"})
    gone.subscribe(
        "/topic/t", id="a", headers={"activemq.subscriptionName": "away", "receipt": "a"}
    )
    assert recorder.wait_until(lambda: "a" in recorder.receipts)
    gone.disconnect()
    here, heard = connect(server.port, **{"client-id": "desk"})
    here.subscribe(
        "/topic/t", id="h", headers={"activemq.subscriptionName": "here", "receipt": "h"}
    )
    assert heard.wait_until(lambda: "h" in heard.receipts)
    fill(server.port, "/topic/t", ["m1", "m2"], persistent="true")
    _open(browser, f"{base}/#/destination/{encoded('/topic/t')}", "destination")
    durable = "Durable subscriptions"
    _until(browser, lambda b: sorted(_column(b, durable, 1)) == ["desk", "shop"])
    rows = {r[0]: r for r in zip(*(_column(browser, durable, n) for n in (1, 4, 6)), strict=True)}
    assert rows["shop"][1:] == ("2", "no") and rows["desk"][2] == "yes"
    seen = dict(zip(_column(browser, durable, 1), _column(browser, durable, 9), strict=True))
    assert seen["desk"] == "—" and seen["shop"].startswith("20"), seen  # a time, when it left
    removable = _texts(browser, f'section[data-title="{durable}"] button[data-action="Remove"]')
    assert removable == ["Remove"], "a connected subscription shows no Remove"
    shoot("durable")
    _click(browser, 'section[data-title="Durable subscriptions"] button[data-action="Remove"]')
    _accept(browser)
    _until(browser, lambda b: _column(b, durable, 1) == ["desk"])
    here.disconnect()


def test_a_viewer_reads_tables_subscriptions_and_stories_and_acts_on_nothing(
    reactor, start_server, browser, shoot, tmp_path
):
    _users(tmp_path / "data")
    server = start_server(**{"Security.allowanonymous": "true"})
    base = f"http://127.0.0.1:{open_console(reactor, server).port}"
    keeper, kept = connect(server.port, **{"client-id": "shop"})
    keeper.subscribe("/topic/v", id="a", headers={"activemq.subscriptionName": "a", "receipt": "a"})
    assert kept.wait_until(lambda: "a" in kept.receipts)
    keeper.disconnect()
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/v", id="1")
    fill(server.port, "/queue/v", ["seen"])
    (message,) = recorder.wait_for_messages(1)
    _log_in(browser, base, "eye")
    assert "Users" not in _texts(browser, "#nav a")
    _open(browser, f"{base}/#/destinations", "destinations")
    _until(browser, lambda b: _column(b, "Queues", 1) == ["/queue/v"])
    assert _text(browser, 'section[data-title="Queues"] .range') == "1–1 of 1"
    assert _texts(browser, 'section[data-title="Queues"] button[data-action]') == []
    assert _texts(browser, 'button[data-action="create"]') == []
    _open(browser, f"{base}/#/destination/{encoded('/topic/v')}", "destination")
    _until(browser, lambda b: _column(b, "Durable subscriptions", 1) == ["shop"])
    assert _actions(browser) == []
    assert _texts(browser, 'button[data-action="Remove"]') == []
    assert _texts(browser, 'button[data-action="publish"]') == []
    shoot("viewer-topic")
    fill(server.port, "/queue/waits", ["browse me"])
    _open(browser, f"{base}/#/destination/{encoded('/queue/waits')}", "destination")
    waiting = "Messages waiting"
    _until(browser, lambda b: _column(b, waiting, 7) == ["browse me"])  # read: browse
    actions = _texts(browser, f'section[data-title="{waiting}"] td button[data-action]')
    assert actions == ["View"], "no Copy, Delete, Move"
    _open(browser, f"{base}/#/story/{encoded(message.headers['message-id'])}", "story")
    _until(browser, lambda b: "consumed" in _texts(b, "table.story tbody td:nth-child(2)"))
    _open(browser, f"{base}/#/users", "overview")  # not a viewer's page: the overview instead
    assert _text(browser, "h1") == "Overview"


def test_an_admin_manages_users_and_their_permissions(
    reactor, start_server, browser, shoot, tmp_path
):
    users = _users(tmp_path / "data")
    server = start_server(**{"Security.allowanonymous": "true"})
    base = f"http://127.0.0.1:{open_console(reactor, server).port}"
    _log_in(browser, base, "boss")
    _open(browser, f"{base}/#/users", "users")
    _until(browser, lambda b: _texts(b, 'tr[data-user="boss"]'))
    _type(browser, 'input[name="new-name"]', "newbie")
    _type(browser, 'input[name="new-password"]', "newbie-pw")
    _click(browser, 'button[data-action="add-user"]')
    row = 'tr[data-user="newbie"]'
    _until(browser, lambda b: _texts(b, row))  # drawn again from the API's answer
    assert users.read().users["newbie"].role == "viewer"  # the least role, unless chosen
    _click(browser, f'{row} select[name="role"] option[value="operator"]')
    _click(browser, f'{row} button[data-action="save-user"]')
    selected = f'{row} select[name="role"] option[selected]'
    _until(browser, lambda b: _attributes(b, selected, "value") == ["operator"])
    assert users.read().users["newbie"].role == "operator"
    _type(browser, f'{row} tr.new-grant input[name="pattern"]', "/queue/newbie.>")
    _click(browser, f'{row} tr.new-grant input[name="read"]')
    _click(browser, f'{row} tr.new-grant button[data-action="grant"]')
    _until(browser, lambda b: _texts(b, f'{row} tr[data-pattern="/queue/newbie.>"]'))
    (grant,) = users.read().users["newbie"].permissions
    assert grant.pattern == "/queue/newbie.>" and grant.permissions == ["read"]
    shoot("users")
    _click(browser, f'{row} button[data-action="remove-user"]')
    _accept(browser)
    _until(browser, lambda b: not _texts(b, row))
    assert "newbie" not in users.read().users
    _click(browser, 'tr[data-user="boss"] button[data-action="remove-user"]')
    _accept(browser)
    _until(browser, lambda b: "last admin" in _text(b, "#flash"))


def _waiting_bodies(browser: WebDriver) -> list[str]:
    return _column(browser, "Messages waiting", 7)


def test_browse_pages_filters_shows_one_message_and_copies_by_role(
    reactor, start_server, browser, shoot, tmp_path
):
    _users(tmp_path / "data")
    server = start_server(**{"Security.allowanonymous": "true"})
    api_port = open_console(reactor, server).port
    base = f"http://127.0.0.1:{api_port}"
    producer, recorder = connect(server.port)
    for i in range(60):
        headers = {"n": str(i), "color": "red" if i % 10 == 0 else "blue"}
        producer.send("/queue/big", f"b{i:02d}", headers=headers)
    producer.send("/queue/big", bytes([0, 1, 2, 255]), headers={"n": "60"}, receipt="all")
    assert recorder.wait_until(lambda: "all" in recorder.receipts)
    producer.disconnect()
    page = f"{base}/#/destination/{encoded('/queue/big')}"
    browse = 'section[data-title="Messages waiting"]'

    # a viewer pages, filters with a selector and opens one message; it copies nothing
    _log_in(browser, base, "eye")
    _open(browser, page, "destination")
    fates = 'section[data-title^="What became of its messages"]'
    _until(browser, lambda b: _text(b, f'{fates} .figure[data-path="received"] .value') == "61")
    assert _text(browser, f'{fates} .figure[data-path="messages"] .value') == "61"
    assert _text(browser, f'{fates} .figure[data-path="acknowledged"] .value') == "0"
    assert _texts(browser, f'{fates} .figure[data-path="publish_rate"] .label') == ["Publish rate"]
    _until(browser, lambda b: _waiting_bodies(b)[:1] == ["b00"] and len(_waiting_bodies(b)) == 50)
    assert _text(browser, f"{browse} .range") == "1–50, more follow"
    _click(browser, f'{browse} button[data-page="next"]')
    _until(browser, lambda b: _waiting_bodies(b)[:10] == [f"b{i}" for i in range(50, 60)])
    assert len(_waiting_bodies(browser)) == 11
    assert _text(browser, f"{browse} .range") == "51–61, the last"
    assert set(_texts(browser, f"{browse} td button[data-action]")) == {"View"}
    _type(browser, f"{browse} input.table-filter", "color = 'red' AND n < 40\n")
    _until(browser, lambda b: _waiting_bodies(b) == ["b00", "b10", "b20", "b30"])
    shoot("browse-selector")
    _click(browser, f'{browse} tbody tr:first-child button[data-action="View"]')
    _until(browser, lambda b: _text(b, "#message-body") == "b00")
    assert "color\tred" in _text(browser, "#message-headers")
    shoot("message")
    _click(browser, '.dialog button[data-action="close"]')
    _until(browser, lambda b: not _texts(b, ".dialog"))

    # the Connections page counts the MESSAGE frames a client got, with its rates
    reader, heard = connect(server.port)
    reader.subscribe("/queue/few", id="1")
    fill(server.port, "/queue/few", ["one", "two"])
    heard.wait_for_messages(2)
    _open(browser, f"{base}/#/connections", "connections")
    headings = _texts(browser, 'section[data-title="Connections"] th')
    assert {"Messages sent", "Publish", "Deliver", "Ack"} <= set(headings)
    sent = headings.index("Messages sent") + 1
    _until(browser, lambda b: "2" in _column(b, "Connections", sent))
    reader.disconnect()

    # an operator copies one, choosing where by searching
    _log_in(browser, base, "ops")
    _open(browser, page, "destination")
    _until(browser, lambda b: _waiting_bodies(b)[:1] == ["b00"])
    _click(browser, f'{browse} tbody tr:first-child button[data-action="Copy"]')
    _type(browser, "#choose-filter", "/queue/copies")
    _click(browser, '.choice[data-destination="/queue/copies"]')
    _click(browser, '.dialog button[data-action="confirm"]')
    _until(browser, lambda b: "Copy:" in _text(b, "#flash"))
    assert 'to "/queue/copies"' in _text(browser, "#flash")
    _open(browser, f"{base}/#/destination/{encoded('/queue/copies')}", "destination")
    _until(browser, lambda b: _waiting_bodies(b) == ["b00"])
    _open(browser, page, "destination")
    _until(browser, lambda b: _waiting_bodies(b)[:1] == ["b00"])  # the original stays

    # an admin opens the binary one: its hex and size
    _log_in(browser, base, "boss")
    _open(browser, page, "destination")
    _click(browser, f'{browse} button[data-page="next"]')
    _until(browser, lambda b: len(_waiting_bodies(b)) == 11)
    assert "Copy" in _texts(browser, f"{browse} tbody tr:last-child button[data-action]")
    _click(browser, f'{browse} tbody tr:last-child button[data-action="View"]')
    _until(browser, lambda b: _text(b, "#message-body") == "000102ff")
    assert "4 bytes, as hex" in _text(browser, ".dialog.message")
    shoot("binary")
