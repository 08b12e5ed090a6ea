"""MemWatch on a fake clock: levels by fractions of maxmemory, their actions, the reader's check."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.defaults import SETTINGS
from tests.fakes import FakeRuntime
from wiremq.config.groups import MemWatchSettings
from wiremq.config.xmlconfig import ConfigError, default_memory_levels, load_config
from wiremq.modules.memory import memwatch as memwatch_module
from wiremq.modules.memory.memwatch import ActionContext, MemoryAction, MemoryReading, MemWatch
from wiremq.modules.pipeline.catalog import build_memory_levels

MB = 1_000_000
DEFAULTS = MemWatchSettings.read(SETTINGS, "MemWatch")


class Reader:
    """A connection as MemWatch sees it."""

    def __init__(self) -> None:
        self.stops: set[object] = set()

    def stop_reading(self, reason: object) -> None:
        self.stops.add(reason)

    def start_reading(self, reason: object) -> None:
        self.stops.discard(reason)


RECORDED: list[tuple[int, int, int]] = []


class Recording(MemoryAction):
    """A plug-in action: records every level change it is told of."""

    def __init__(self, context: ActionContext, options: Mapping[str, str]) -> None:
        super().__init__(context, options)
        self.tag = options.get("tag", "")

    def level_changed(self, old: int, new: int, reading: MemoryReading) -> None:
        RECORDED.append((self.level, old, new))


def watch(runtime: FakeRuntime, memory: list[int], **overrides: object) -> MemWatch:
    """A MemWatch over 100 MB with the manual's levels, measuring ``memory[0]``."""
    settings = MemWatchSettings(**{**vars_of(DEFAULTS), "maxmemory": 100 * MB, **overrides})
    levels = build_memory_levels(default_memory_levels(), settings, runtime)
    return MemWatch(settings, levels, runtime, lambda: memory[0], lambda: {"held": 7})


def vars_of(settings: MemWatchSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


def test_levels_follow_the_measured_memory_with_hysteresis(monkeypatch):
    runtime = FakeRuntime()
    collected: list[float] = []
    monkeypatch.setattr(memwatch_module, "release_memory", lambda: collected.append(runtime.now))
    memory = [10 * MB]
    mem = watch(runtime, memory)
    mem.start()
    assert mem.level == 0 and collected == []
    memory[0] = 55 * MB
    runtime.advance(DEFAULTS.checkinterval)
    assert mem.level == 1
    runtime.advance(5.0)  # level 1: one extra collection at once, then every 2 s
    assert [round(t - collected[0], 2) for t in collected] == [0.0, 2.0, 4.0]
    memory[0] = 48 * MB  # below 50 % but not below 45 %: still level 1
    runtime.advance(DEFAULTS.checkinterval)
    assert mem.level == 1
    collected.clear()
    with capture_logs() as logs:
        memory[0] = 85 * MB
        runtime.advance(DEFAULTS.checkinterval)
        assert mem.level == 2
        entered = runtime.now
        runtime.advance(1.6)  # level 2: every 750 ms, and level 1's collections stopped
        memory[0] = 20 * MB
        runtime.advance(DEFAULTS.checkinterval)
    assert mem.level == 0
    at_two = sorted({t for t in collected if t >= entered})  # level 1's may be due then too
    gaps = [round(b - a, 2) for a, b in zip(at_two, at_two[1:], strict=False)]
    assert at_two[0] == entered and gaps == [0.75, 0.75]
    events = [(e["event"], e.get("log_level")) for e in logs if e["event"].startswith("memory.")]
    assert ("memory.high", "warning") in events and ("memory.normal", "info") in events
    assert events.index(("memory.high", "warning")) < events.index(("memory.normal", "info"))
    collected.clear()
    runtime.advance(10.0)
    assert collected == [], "no extra collections at level 0"


def test_long_collections_are_spaced_to_take_at_most_collectshare_of_the_time(monkeypatch):
    runtime = FakeRuntime()
    took = [0.0]  # how long the next collections take, on the fake clock
    collected: list[float] = []

    def collect() -> None:
        collected.append(runtime.now)
        runtime.now += took[0]

    monkeypatch.setattr(memwatch_module, "release_memory", collect)
    memory = [85 * MB]
    mem = watch(runtime, memory, collectshare=0.1)
    mem.start()
    assert mem.level == 2
    runtime.advance(1.6)  # quick collections: every 750 ms, the level's interval
    assert [round(b - a, 2) for a, b in zip(collected, collected[1:], strict=False)] == [
        0.75,
        0.75,
    ]
    took[0] = 1.5  # a heap of millions of live objects: 1.5 s each
    collected.clear()
    runtime.advance(40.0)
    starts = [round(b - a, 2) for a, b in zip(collected, collected[1:], strict=False)]
    assert starts and all(gap == 1.5 + 15.0 for gap in starts), starts
    took[0] = 0.01  # quick again: back to the interval after the next one
    collected.clear()
    runtime.advance(20.0)
    gaps = [round(b - a, 2) for a, b in zip(collected, collected[1:], strict=False)]
    assert gaps[-3:] == [0.76, 0.76, 0.76], gaps


def test_a_reader_waits_at_the_top_level_until_memory_is_free(monkeypatch):
    monkeypatch.setattr(memwatch_module, "release_memory", lambda: None)
    runtime = FakeRuntime()
    memory = [10 * MB]
    mem = watch(runtime, memory)
    mem.start()
    reader = Reader()
    assert mem.check_frame(reader, 10 * MB) and not reader.stops
    memory[0] = 90 * MB  # measured at the check itself, not only at the next interval
    assert mem.check_frame(reader, 10 * MB) and reader.stops == {mem}
    assert mem.check_frame(Reader(), DEFAULTS.messagethreshold), "small frames are not checked"
    runtime.advance(5.0)
    assert reader.stops == {mem}, "still full"
    memory[0] = 60 * MB  # level 1: not the top any more
    runtime.advance(DEFAULTS.checkinterval)
    assert reader.stops == set()
    assert mem.state()["readers_waiting"] == 0


def test_with_whenfull_disconnect_the_reader_is_refused(monkeypatch):
    monkeypatch.setattr(memwatch_module, "release_memory", lambda: None)
    runtime = FakeRuntime()
    mem = watch(runtime, [95 * MB], whenfull="disconnect")
    reader = Reader()
    assert mem.check_frame(reader, 10 * MB) is False
    assert not reader.stops and mem.state()["frames_refused"] == 1


def test_state_shows_both_figures_and_the_levels(monkeypatch):
    monkeypatch.setattr(memwatch_module, "release_memory", lambda: None)
    runtime = FakeRuntime()
    mem = watch(runtime, [60 * MB])
    mem.start()
    state = mem.state()
    assert state["measured"] == 60 * MB and state["estimated"] == {"held": 7}
    assert state["level"] == 1 and state["maxmemory"] == 100 * MB
    assert [level["actions"] for level in state["levels"]] == [
        ["collect"],
        ["collect", "warn"],
    ]


def test_custom_levels_and_actions_come_from_config_xml(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(memwatch_module, "release_memory", lambda: None)
    config = tmp_path / "config.xml"
    config.write_text(
        "<wiremq>\n"
        "  <MemoryLevels>\n"
        '    <level from="0.3"><action name="collect" interval="5"/></level>\n'
        '    <level from="0.6" clear="0.4">\n'
        f'      <action class="{__name__}:Recording" tag="x"/>\n'
        "    </level>\n"
        '    <level from="0.9"><action name="warn"/></level>\n'
        "  </MemoryLevels>\n"
        "</wiremq>\n"
    )
    loaded = load_config(config)
    runtime = FakeRuntime()
    settings = MemWatchSettings(**{**vars_of(DEFAULTS), "maxmemory": 100 * MB})
    levels = build_memory_levels(loaded.memory_levels, settings, runtime)
    assert [(lv.start, round(lv.clear, 2)) for lv in levels] == [
        (0.3, 0.25),
        (0.6, 0.4),
        (0.9, 0.85),
    ]
    memory = [65 * MB]
    RECORDED.clear()
    mem = MemWatch(settings, levels, runtime, lambda: memory[0], dict)
    mem.start()
    memory[0] = 45 * MB  # above its clear bound: still level 2
    runtime.advance(DEFAULTS.checkinterval)
    memory[0] = 35 * MB
    runtime.advance(DEFAULTS.checkinterval)
    assert mem.level == 1 and mem.top == 3
    assert RECORDED == [(2, 0, 2), (2, 2, 1)]


@pytest.mark.parametrize(
    ("levels", "line", "fragment"),
    [
        ('<level from="0.8"/><level from="0.5"/>', 3, "must be above the level before"),
        ('<level from="0.5" clear="0.6"/>', 3, "clear=0.6 is above from=0.5"),
        ("<level/>", 3, "needs from="),
        ('<level from="x"/>', 3, "is not a number"),
        ('<level from="0.5"><action name="nap"/></level>', 3, "unknown memory action 'nap'"),
        ('<level from="0.5"><action name="collect"/></level>', 3, "needs interval="),
        (
            '<level from="0.5"><action name="collect" interval="-1"/></level>',
            3,
            "more than 0",
        ),
        ('<level from="0.5"><action class="os:path"/></level>', 3, "not a MemoryAction"),
        ('<level from="0.5"><thing/></level>', 3, "holds <action> elements"),
    ],
)
def test_bad_levels_are_refused_naming_the_line(tmp_path: Path, levels, line, fragment):
    config = tmp_path / "config.xml"
    config.write_text(f"<wiremq>\n  <MemoryLevels>\n  {levels}\n  </MemoryLevels>\n</wiremq>\n")
    runtime = FakeRuntime()
    with pytest.raises(ConfigError) as caught:
        loaded = load_config(config)
        build_memory_levels(loaded.memory_levels, DEFAULTS, runtime)
    assert str(caught.value).startswith(f"{config}:{line}: ")
    assert fragment in str(caught.value)
