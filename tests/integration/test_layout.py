"""The console's declarative layout (admin/static/layout.json) names only what the API answers:
every source is a route, every figure and column a path of its answer on a busy server, every
chart series one the history keeps, every format one the page knows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.integration.clients import connect, fill
from tests.integration.console import encoded
from wiremq.admin.destinations import SORTS
from wiremq.modules.history import DESTINATION_SERIES, SERVER_SERIES

STATIC = Path(__file__).resolve().parents[2] / "admin" / "static"
LAYOUT = json.loads((STATIC / "layout.json").read_text())
FORMATS = set(re.findall(r"^  (\w+): ", (STATIC / "console.js").read_text(), re.MULTILINE))
SCRIPTS = "".join(p.read_text() for p in STATIC.glob("*.js"))
SECTION_TYPES = set(re.findall(r"^  (\w+)\(section", SCRIPTS, re.MULTILINE)) | set(
    re.findall(r"^\s*SECTIONS\.(\w+) = ", SCRIPTS, re.MULTILINE)
)
FORMS = set(re.search(r"const FORMS = \{ ([\w, ]+) \}", SCRIPTS).group(1).split(", "))
MISSING = object()
# Rows empty on a healthy server, and where rows of the same shape are found.
SAME_SHAPE = {"slow_subscribers": ("/api/state", "sockets")}


def _pick(data: Any, path: str | list[str]) -> Any:
    if isinstance(path, list):
        values = [_pick(data, p) for p in path]
        return MISSING if MISSING in values else values
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return MISSING
        data = data[key]
    return data


def _filled(template: str, parameters: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: encoded(parameters[m.group(1)]), template)


def _rows(data: Any, path: str) -> list[dict[str, Any]]:
    rows = _pick(data, path)
    assert rows is not MISSING, path
    if isinstance(rows, dict):
        return [{"_key": key, **row} for key, row in rows.items()]
    return list(rows)


def test_every_entry_of_the_layout_is_answered_by_the_api(console):
    server, api = console
    fill(server.port, "/queue/work", ["a", "b"], persistent="true", color="red")
    consumer, recorder = connect(server.port, login="ann", **{"client-id": "c"})
    consumer.subscribe(  # holds the first message: the second waits
        "/queue/work", id="w", ack="client-individual", headers={"activemq.prefetchSize": "1"}
    )
    consumer.subscribe(
        "/topic/news", id="n", headers={"receipt": "s", "activemq.subscriptionName": "n"}
    )
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    recorder.wait_for_messages(1)
    session = api.get("/api/connections")["connections"][0]["session"]
    # a page of one destination shows a queue or a topic: an entry is answered by one of them
    variants = [{"name": "/queue/work", "session": session}, {"name": "/topic/news"}]
    assert "count" in FORMATS and "bytes" in FORMATS
    assert {"table", "figures", "form", "users", "story"} <= SECTION_TYPES
    assert {"publish", "create"} == FORMS
    checked = 0
    for page in LAYOUT["pages"]:
        for section in page["sections"]:
            assert section["type"] in SECTION_TYPES, section
            assert section.get("form") in (None, *FORMS), section
            for item in (*section.get("items", ()), *section.get("columns", ())):
                assert item.get("format", "count") in FORMATS, item
                assert item.get("sort") in (None, *SORTS), item
            if "series" in section:
                known = DESTINATION_SERIES if "destination" in section else SERVER_SERIES
                assert set(section["series"]) <= {s.chart for s in known}, section
            if "source" not in section:
                continue
            answers = []
            for parameters in variants:
                try:
                    source = _filled(section["source"], parameters)
                except KeyError:
                    continue
                answer = api.request("GET", source)
                if answer.status == 200:
                    answers.append(answer.json)
            assert answers, section["source"]
            for item in section.get("items", ()):
                assert any(_pick(a, item["path"]) is not MISSING for a in answers), item
                checked += 1
            if "rows" in section:
                rows = [row for a in answers for row in _rows(a, section["rows"])]
                if section["rows"] in SAME_SHAPE:
                    elsewhere, path = SAME_SHAPE[section["rows"]]
                    rows = _rows(api.get(elsewhere), path)
                assert rows, (section["source"], section["rows"])
                for column in section["columns"]:
                    assert any(_pick(row, column["path"]) is not MISSING for row in rows), column
                    checked += 1
    assert checked > 100
