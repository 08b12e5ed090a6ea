"""Changing parameters while the server runs: checked, saved to config.xml, applied if live;
and config.xml rewritten in place, everything else in it kept."""

from __future__ import annotations

import pytest

from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.tuning import SaveFailed, Tuning, TuningError, UnknownParameter, coerce
from wiremq.config.xmlconfig import ConfigError, check_config, load_config, save_values

CONFIG = """<?xml version="1.0"?>
<!-- the operator's notes: <StompListener port="1"/> is not an element -->
<wiremq>
  <Pipeline domain="p2p">
    <module name="admission"/><module name="transaction"/><module name="storage"/>
    <module name="distributing"/>
  </Pipeline>
  <VolQueueStoreImpl globalbytehighwatermark = '20000000'
     globalbytelowwatermark="15000000"/>  <!-- tuned -->
  <StompListener port="61613"></StompListener>
  <DestinationManager globaltopicbytehighwatermark="2048000" globaltopicbytelowwatermark="2000000"/>
  <Destination name="/queue/a" maxttl="5"/>
</wiremq>
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.xml"
    path.write_text(CONFIG)
    return path


def test_values_are_replaced_where_they_are_given_and_the_rest_is_kept(config):
    save_values(
        config,
        {
            "VolQueueStoreImpl.globalbytehighwatermark": 30_000_000,
            "DestinationManager.topicglobalbytehighwatermark": 4_096_000,  # given by its alias
        },
    )
    text = config.read_text()
    assert 'globalbytehighwatermark = "30000000"' in text
    assert 'globaltopicbytehighwatermark="4096000"' in text
    for kept in ("the operator's notes", "<!-- tuned -->", '<module name="transaction"/>'):
        assert kept in text
    assert text.replace('"30000000"', "'20000000'").replace("4096000", "2048000") == CONFIG
    assert config.with_name("config.xml.bak").read_text() == CONFIG


def test_a_value_not_given_goes_to_its_group_or_a_new_element(config):
    save_values(
        config,
        {
            "StompListener.maxheaders": 50,
            "P2PStore.maxdelay": 3,
            "P2PStore.maxdelayedmessagesnumber": 7,
        },
    )
    text = config.read_text()
    assert '<StompListener port="61613" maxheaders="50"></StompListener>' in text
    assert '  <P2PStore maxdelay="3" maxdelayedmessagesnumber="7"/>\n</wiremq>' in text
    settings = load_config(config).settings
    assert settings.get("P2PStore", "maxdelayedmessagesnumber") == 7
    assert settings.get("StompListener", "maxheaders") == 50


def test_destination_overrides_are_set_and_removed(config):
    save_values(
        config, {}, {"/queue/a": {"maxttl": None, "shutdown": True}, "/topic/b": {"maxttl": 9}}
    )
    settings = load_config(config).settings
    assert settings.destinations == {"/queue/a": {"shutdown": True}, "/topic/b": {"maxttl": 9}}


def test_a_new_file_is_made_when_there_is_none(tmp_path):
    path = tmp_path / "config.xml"
    save_values(path, {"Server.loglevel": "warning"})
    assert load_config(path).settings.get("Server", "loglevel") == "warning"
    assert not path.with_name("config.xml.bak").exists()


def test_a_change_the_file_would_not_load_with_is_not_written(config):
    with pytest.raises(ConfigError, match="would not load"):
        save_values(config, {"VolQueueStoreImpl.globalbytelowwatermark": 90_000_000})
    assert config.read_text() == CONFIG


def test_check_config_names_every_problem(tmp_path):
    path = tmp_path / "config.xml"
    path.write_text('<wiremq>\n<StompListener port="x" nope="1"/>\n<Bad/>\n</wiremq>\n')
    problems = [str(p) for p in check_config(path)]
    assert len(problems) == 3
    assert problems[0] == (
        f"{path}:2: StompListener.port: 'x' is not valid: expected a whole number from 0 to 65535, "
        "or -1 to switch it off"
    )
    assert problems[1].startswith(f"{path}:2: StompListener.nope: unknown parameter; known")
    assert problems[2].startswith(f"{path}:3: unknown parameter group <Bad>; known groups:")
    assert check_config(tmp_path / "none.xml")[0].problem.startswith("cannot read the file")


# -- Tuning ------------------------------------------------------------------------------------


@pytest.fixture
def tuning(config):
    return Tuning(load_config(config).settings, config)


@pytest.mark.parametrize(
    ("key", "raw", "value"),
    [
        ("ClientEgress.maxdepth", 500, 500),
        ("ClientEgress.maxdepth", "500", 500),
        ("SlowSubscriber.warnshare", 0, 0.0),
        ("SlowSubscriber.disconnect", True, True),
        ("SlowSubscriber.disconnect", "false", False),
        ("Server.loglevel", "debug", "debug"),
    ],
)
def test_json_values_are_taken_as_the_parameters_type(key, raw, value):
    parsed = coerce(REGISTRY.get(*key.split(".")), raw)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("ClientEgress.maxdepth", True),
        ("ClientEgress.maxdepth", 2.0),
        ("SlowSubscriber.disconnect", 1),
        ("Server.loglevel", 3),
        ("ClientEgress.maxdepth", None),
        ("ClientEgress.maxdepth", [1]),
        ("Server.datadir", "\x1b"),  # text config.xml cannot hold (was a 500)
        ("Destination.deadmessagequeue", "/queue/\x00"),
    ],
)
def test_json_values_of_another_type_are_refused(key, raw):
    with pytest.raises(ValueError, match="expected"):
        coerce(REGISTRY.get(*key.split(".")), raw)


def test_a_live_change_is_in_force_and_the_listeners_are_told(tuning, config):
    told = []
    tuning.settings.on_change(told.append)
    (outcome,) = tuning.change({"SlowSubscriber.warnshare": 0.25})
    assert outcome.applied and tuning.settings.get("SlowSubscriber", "warnshare") == 0.25
    assert told == [frozenset({"SlowSubscriber"})]
    assert load_config(config).settings.get("SlowSubscriber", "warnshare") == 0.25


def test_a_change_that_is_not_live_waits_for_a_restart(tuning, config):
    told = []
    tuning.settings.on_change(told.append)
    (outcome,) = tuning.change({"ClientEgress.maxdepth": 300})
    assert not outcome.applied and tuning.pending == {"ClientEgress.maxdepth": 300}
    assert tuning.settings.get("ClientEgress", "maxdepth") == 20000
    assert load_config(config).settings.get("ClientEgress", "maxdepth") == 300
    assert told == [frozenset()]
    tuning.change({"ClientEgress.maxdepth": 20000})  # back to what is in force
    assert tuning.pending == {}


def test_rules_between_parameters_count_what_waits_for_a_restart_too(tuning):
    tuning.change({"MessageSpool.usagesetpercent": 70})  # live? no: on restart
    with pytest.raises(TuningError, match="above MessageSpool.usagesetpercent \\(70\\)") as caught:
        tuning.change({"MessageSpool.usageclearpercent": 75})
    assert caught.value.parameter == "MessageSpool.usageclearpercent"


def test_nothing_changes_if_anything_is_refused(tuning, config):
    before = config.read_text()
    with pytest.raises(TuningError, match="out of range"):
        tuning.change({"SlowSubscriber.warnshare": 0.1, "ClientEgress.maxdepth": 1})
    with pytest.raises(UnknownParameter):
        tuning.change({"SlowSubscriber.warnshare": 0.1, "No.such": 1})
    assert tuning.settings.get("SlowSubscriber", "warnshare") == 0.5
    assert config.read_text() == before


def test_a_file_that_cannot_be_written_changes_nothing(tmp_path):
    tuning = Tuning(Settings(REGISTRY), tmp_path / "no such folder" / "config.xml")
    with pytest.raises(SaveFailed, match="cannot write"):
        tuning.change({"SlowSubscriber.warnshare": 0.1})
    assert tuning.settings.get("SlowSubscriber", "warnshare") == 0.5


def test_destination_overrides_change_live_ones_at_once(tuning):
    outcomes = tuning.change_destination("/queue/a", {"shutdown": True, "whenfull": "fail"})
    assert [(o.key, o.applied) for o in outcomes] == [
        ("Destination.shutdown@/queue/a", True),
        ("Destination.whenfull@/queue/a", False),
    ]
    assert tuning.settings.for_destination("/queue/a", "shutdown") is True
    assert tuning.settings.for_destination("/queue/a", "whenfull") == "block"
    assert tuning.pending_destinations == {"/queue/a": {"whenfull": "fail"}}


def test_settings_copy_is_independent_and_change_is_all_or_none():
    settings = Settings(REGISTRY)
    twin = settings.copy()
    twin.change({"ClientEgress.maxdepth": 100})
    assert settings.get("ClientEgress", "maxdepth") == 20000
    with pytest.raises(ValueError):
        settings.change({"ClientEgress.maxdepth": 100, "MessageSpool.usageclearpercent": 99})
    assert settings.get("ClientEgress", "maxdepth") == 20000
