"""The Grafana dashboard of ``packaging/`` queries only metrics a running server exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.integration.clients import connect, fill

DASHBOARD = Path(__file__).resolve().parents[2] / "packaging" / "grafana-dashboard.json"
METRIC = re.compile(r"\bwiremq_[a-z_]+\b")


def _queries(node: Any) -> list[str]:
    """Every PromQL query of a dashboard: its panels' targets and its variables'."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_queries(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_queries(item))
    return found


def _exported(text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("wiremq_")
    }


def test_every_metric_the_dashboard_queries_is_exported(start_server, console_of):
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {m for query in _queries(dashboard) for m in METRIC.findall(query)}
    assert len(queried) >= 20, queried
    server = start_server(**{"MessageSpool.maxspoolusage": "10"})
    api = console_of(server)
    fill(server.port, "/queue/dash", ["a", "b"])
    consumer, recorder = connect(server.port)
    consumer.subscribe("/topic/dash", id="1")
    consumer.send("/queue/full", "x" * 100, headers={"persistent": "true"})  # refused
    assert recorder.wait_until(lambda: recorder.errors)
    answer = api.request("GET", "/metrics")
    assert answer.status == 200
    exported = _exported(answer.body.decode())
    assert queried <= exported, f"queried, not exported: {sorted(queried - exported)}"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["targets"] and p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
