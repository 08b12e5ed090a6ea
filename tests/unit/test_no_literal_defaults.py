"""Every tunable comes from the parameter registry: no default is written anywhere else.

The code reads parameters only through the typed settings objects of
``config/groups.py``, whose fields have no defaults; and no function outside
``config/`` carries a number as a default argument or a dataclass field a
number as its default (0, 1 and -1 excepted: they are not tunables), so no
literal can stand in for, or drift from, a registry default.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from wiremq.config import groups
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("server", "modules", "stores", "admin", "analytics")
NOT_TUNABLE = (0, 1, -1)


def _sources() -> list[Path]:
    return sorted(p for package in CHECKED for p in (ROOT / package).rglob("*.py"))


def _literal_number(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and node.value not in NOT_TUNABLE
    )


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT)
    found = []
    groups_known = set(REGISTRY.groups())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            defaults = [*arguments.defaults, *arguments.kw_defaults]
            for default in defaults:
                if _literal_number(default):
                    found.append(f"{where}:{node.lineno}: {node.name}() defaults to a number")
        elif isinstance(node, ast.AnnAssign) and _literal_number(node.value):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node.target)} defaults to a number")
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and first.value in groups_known
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
            ):
                found.append(f"{where}:{node.lineno}: reads {first.value} by name")
    return found


def test_the_code_has_no_literal_defaults_and_reads_no_parameter_by_name():
    findings = [finding for path in _sources() for finding in _findings(path)]
    assert findings == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def read(limit=100, *, delay=0.5):\n"
        "    return settings.get('P2PStore', 'maxdelay')\n"
        "class C:\n"
        "    depth: int = 20000\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(_findings(bad)) == 4
    finally:
        ROOT = saved


SETTINGS_GROUPS = [
    cls
    for cls in vars(groups).values()
    if isinstance(cls, type)
    and issubclass(cls, groups.SettingsGroup)
    and cls is not groups.SettingsGroup
]


@pytest.mark.parametrize("cls", SETTINGS_GROUPS, ids=lambda cls: cls.__name__)
def test_typed_settings_have_no_defaults_and_name_registry_parameters(cls):
    fields = dataclasses.fields(cls)
    assert fields
    for field in fields:
        assert field.default is dataclasses.MISSING, f"{cls.__name__}.{field.name} has a default"
        assert field.default_factory is dataclasses.MISSING
        assert any(p.name.lower().endswith(field.name.lower()) for p in REGISTRY), field.name


READ_AS = {  # each typed settings object with the groups (and prefixes) it is read from
    groups.ServerSettings: [("Server", "")],
    groups.ListenerSettings: [("StompListener", "")],
    groups.ClientBounds: [("StompListener", "")],
    groups.BufferSettings: [("P2PPrioQueue", ""), ("PubSubPrioQueue", "")],
    groups.StoreBufferSettings: [("P2PStore", ""), ("PubSubStore", "")],
    groups.StoreSettings: [("PersQueueFileStore", ""), ("TopicFileStore", "")],
    groups.QueueStoreSettings: [("PersQueueFileStore", "")],
    groups.WalSettings: [("WriteAheadLog", "")],
    groups.HaSettings: [("HA", "")],
    groups.DiskSpaceSettings: [("DiskSpace", "")],
    groups.ReplaySettings: [("TopicFileStore", "")],
    groups.LiveBufferSettings: [("DestinationManager", "")],
    groups.IdleDestinationSettings: [("DestinationManager", "")],
    groups.SweepSettings: [("DestinationManager", "")],
    groups.WatermarkLimits: [
        ("VolQueueStoreImpl", ""),
        ("VolQueueStoreImpl", "global"),
        ("PersQueueFileStore", "global"),
        ("TopicFileStore", "global"),
        ("DestinationManager", "topic"),
        ("DestinationManager", "topicglobal"),
    ],
    groups.SpoolSettings: [("MessageSpool", "")],
    groups.EgressSettings: [("ClientEgress", "")],
    groups.SlowSubscriberSettings: [("SlowSubscriber", "")],
    groups.ReplayPoolSettings: [("DurableTopicSubscriberThreadPool", "")],
    groups.DurableLimitSettings: [("DurableTopicSubscriptionManager", "")],
    groups.CleanupIntervalSettings: [("VolQueueStoreImpl", "")],
    groups.JournalSettings: [("Journal", "")],
    groups.AdminSettings: [("Admin", "")],
    groups.SecuritySettings: [("Security", "")],
    groups.TlsSettings: [("TLS", "")],
    groups.WebSocketSettings: [("WebSocketListener", "")],
    groups.TransactionMemorySettings: [("TransactionMemSizeManager", "")],
    groups.XASettings: [("XATransactionController", "")],
    groups.MemWatchSettings: [("MemWatch", "")],
    groups.WorkPoolSettings: [("QueueThreadPool", ""), ("TopicThreadPool", "")],
}


def test_every_typed_settings_object_reads_the_registry_defaults():
    assert set(READ_AS) | {groups.DestinationPolicy} == set(SETTINGS_GROUPS)
    settings = Settings(REGISTRY)
    for cls, scopes in READ_AS.items():
        for group, prefix in scopes:
            values = cls.read(settings, group, prefix)
            for field in dataclasses.fields(cls):
                expected = REGISTRY.get(group, prefix + field.name)
                assert expected is not None
                assert getattr(values, field.name) == expected.default
    policy = groups.DestinationPolicy.for_destination(settings, "/queue/x")
    assert policy.maxttl == settings.get("Destination", "maxttl")
