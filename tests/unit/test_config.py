"""The parameter registry, Settings, and reading and writing config.xml."""

import pytest

from tests.relations import CASES, config_file
from wiremq.config.parameters import REGISTRY
from wiremq.config.registry import Condition, Order, Parameter, Registry, RelationError
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ConfigError, ModuleSpec, load_config, render_config

COUNT = Parameter("G", "count", int, 10, "a count", minimum=1, maximum=100, off=-1)
RATIO = Parameter("G", "ratio", float, 0.5, "a ratio", minimum=0.0, maximum=1.0)
FLAG = Parameter("G", "flag", bool, False, "a flag")
MODE = Parameter("G", "mode", str, "fast", "a mode", choices=("fast", "safe"))
NAME = Parameter("G", "name", str, "x", "free text")
TEST_REGISTRY = Registry([COUNT, RATIO, FLAG, MODE, NAME])
LOW = Parameter("P", "low", int, 1, "a low bound", minimum=0, maximum=100, off=-1)
HIGH = Parameter("P", "high", int, 5, "a high bound", minimum=0, maximum=100, off=-1)
ORDERED = Registry([LOW, HIGH], [Order("P.low", "P.high", "low before high", paired=True)])


# -- registry --------------------------------------------------------------------------


def test_registering_a_parameter_twice_is_refused():
    twin = Parameter("g", "COUNT", int, 5, "the same key, spelt differently")
    with pytest.raises(ValueError, match="registered twice"):
        Registry([COUNT, twin])


def test_a_default_outside_the_bounds_is_refused():
    with pytest.raises(ValueError, match="out of range"):
        Registry([Parameter("G", "bad", int, 0, "default below minimum", minimum=1)])


def test_lookup_ignores_case():
    assert TEST_REGISTRY.get("g", "RATIO") is RATIO
    assert TEST_REGISTRY.group("g") == "G"
    assert TEST_REGISTRY.get("G", "nope") is None


@pytest.mark.parametrize(
    ("param", "text", "value"),
    [
        (COUNT, " 42 ", 42),
        (COUNT, "100", 100),
        (COUNT, "-1", -1),  # the off value, outside the bounds
        (RATIO, "0.25", 0.25),
        (FLAG, "TRUE", True),
        (FLAG, "false", False),
        (MODE, "safe", "safe"),
        (NAME, " spaced ", "spaced"),
    ],
)
def test_parse_accepts(param, text, value):
    parsed = param.parse(text)
    assert parsed == value
    assert type(parsed) is type(value)


@pytest.mark.parametrize(
    ("param", "text", "allowed"),
    [
        (COUNT, "4.2", "a whole number from 1 to 100, or -1 to switch it off"),
        (COUNT, "0", "a whole number from 1 to 100, or -1 to switch it off"),
        (COUNT, "101", "from 1 to 100"),
        (COUNT, "-2", "from 1 to 100"),
        (RATIO, "1.5", "a number from 0 to 1"),
        (RATIO, "half", "a number from 0 to 1"),
        (FLAG, "yes", "true or false"),
        (MODE, "slow", "one of fast, safe"),
    ],
)
def test_parse_refuses_with_what_is_allowed(param, text, allowed):
    with pytest.raises(ValueError, match="expected") as caught:
        param.parse(text)
    assert allowed in str(caught.value)


@pytest.mark.parametrize("text", ["\x08", "a\x00b", "\x1b[0m", "\ufffe", "\ud800"])
def test_text_config_xml_cannot_hold_is_refused(text):
    """config.xml (XML 1.0) cannot hold control characters other than tab and line ends,
    nor lone surrogates: such a value could never be saved, so it is no value."""
    with pytest.raises(ValueError, match="control characters"):
        NAME.check(text)


def test_nan_is_out_of_range():
    with pytest.raises(ValueError):
        REGISTRY.get("StompListener", "heartbeatgrace").parse("nan")


def test_suggest_names_the_closest_parameter_or_lists_them():
    assert TEST_REGISTRY.suggest("G", "cuont") == "did you mean 'count'?"
    assert TEST_REGISTRY.suggest("G", "zzz") == "known parameters: count, ratio, flag, mode, name"


# -- settings --------------------------------------------------------------------------


def test_settings_start_from_defaults_and_take_overrides():
    settings = Settings(TEST_REGISTRY, {"G.count": 7})
    assert settings.get("g", "COUNT") == 7
    assert settings.get("G", "ratio") == 0.5
    assert settings.get("G", "mode") == "fast"
    settings.set("g.ratio", 1.0)
    assert dict(settings.items())["G.ratio"] == 1.0


def test_settings_refuse_unknown_and_out_of_range():
    settings = Settings(TEST_REGISTRY)
    with pytest.raises(KeyError, match="G.nope"):
        settings.get("G", "nope")
    with pytest.raises(ValueError, match="out of range"):
        settings.set("G.count", 0)
    assert settings.get("G", "count") == 10


# -- config.xml ------------------------------------------------------------------------


def write(tmp_path, *lines: str):
    """A config.xml whose given lines start at line 3."""
    return config_file(tmp_path, lines)


def config_error(path, overrides=None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    return caught.value


def test_no_file_means_defaults():
    config = load_config(None)
    assert config.settings.get("StompListener", "port") == 61613
    assert [m.reference for m in config.pipelines["p2p"]] == [
        "admission",
        "transaction",
        "prioqueue",
        "storage",
        "distributing",
    ]


def test_valid_file(tmp_path):
    path = write(
        tmp_path,
        '<StompListener port="1234" heartbeatgrace="1.5"/>',
        '<server loglevel="debug"/>',
        '<Pipeline domain="pubsub">',
        '  <module name="storage"/>',
        '  <module class="my.plugins:Audit"/>',
        '  <module name="distributing"/>',
        "</Pipeline>",
    )
    config = load_config(path)
    settings = config.settings
    assert settings.get("StompListener", "port") == 1234
    assert settings.get("StompListener", "heartbeatgrace") == 1.5
    assert settings.get("Server", "loglevel") == "debug"
    assert settings.get("StompListener", "maxheaders") == 1000
    assert config.pipelines["pubsub"] == [
        ModuleSpec("storage", False, f"{path}:6"),
        ModuleSpec("my.plugins:Audit", True, f"{path}:7"),
        ModuleSpec("distributing", False, f"{path}:8"),
    ]
    assert len(config.pipelines["p2p"]) == 5  # not listed: the default chain


@pytest.mark.parametrize(
    ("lines", "line", "fragments"),
    [
        (["<Broker x='1'/>"], 3, ["unknown parameter group <Broker>", "StompListener"]),
        (
            ['<StompListener prot="1"/>'],
            3,
            ["StompListener.prot", "unknown parameter", "did you mean 'port'?"],
        ),
        (
            ["", '<StompListener port="70000"/>'],
            4,
            ["StompListener.port", "70000 is out of range", "from 0 to 65535"],
        ),
        (['<StompListener heartbeatgrace="lots"/>'], 3, ["StompListener.heartbeatgrace", "lots"]),
        (["<StompListener><port>1</port></StompListener>"], 3, ["as attributes"]),
        (["<Pipeline domain='queue'/>"], 3, ["domain must be p2p or pubsub"]),
        (["<Pipeline domain='p2p'>", "<module/>", "</Pipeline>"], 4, ["exactly one of"]),
        (
            ["<Pipeline domain='p2p'>", "<module name='storage' class='a:B'/>", "</Pipeline>"],
            4,
            ["exactly one of"],
        ),
        (["<Pipeline domain='p2p'>", "<step name='x'/>", "</Pipeline>"], 4, ["<step>"]),
        (["<Pipeline domain='p2p'/>", "<Pipeline domain='p2p'/>"], 4, ["listed twice"]),
        (["<StompListener port='1'>", "</wrong>"], 4, ["not well-formed XML"]),
    ],
    ids=[
        "unknown-group",
        "unknown-parameter",
        "out-of-range",
        "not-a-number",
        "child-elements",
        "bad-domain",
        "module-neither",
        "module-both",
        "not-a-module",
        "duplicate-domain",
        "malformed-xml",
    ],
)
def test_bad_file_is_refused_naming_file_and_line(tmp_path, lines, line, fragments):
    path = write(tmp_path, *lines)
    message = str(config_error(path))
    assert message.startswith(f"{path}:{line}: ")
    for fragment in fragments:
        assert fragment in message


def test_wrong_root_element(tmp_path):
    path = tmp_path / "config.xml"
    path.write_text("<config>\n</config>\n")
    assert str(config_error(path)) == f"{path}:1: the root element must be <wiremq>"


def test_missing_file(tmp_path):
    path = tmp_path / "absent.xml"
    assert str(config_error(path)).startswith(f"{path}: cannot read the file")


def test_command_line_overrides_the_file(tmp_path):
    path = write(tmp_path, '<StompListener port="1234" host="0.0.0.0"/>')
    config = load_config(path, {"stomplistener.PORT": "2000"})
    assert config.settings.get("StompListener", "port") == 2000
    assert config.settings.get("StompListener", "host") == "0.0.0.0"


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"StompListener.nope": "1"}, "command line: StompListener.nope: unknown parameter"),
        ({"StompListener.port": "-5"}, "command line: StompListener.port: -5 is out of range"),
    ],
)
def test_bad_command_line_override(override, fragment):
    assert fragment in str(config_error(None, override))


# -- rules between two parameters ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_broken_rule_between_two_parameters_names_file_line_and_parameter(tmp_path, case):
    path = config_file(tmp_path, case.lines)
    message = str(config_error(path))
    assert message.startswith(f"{path}:{case.line}: {case.parameter}: "), message
    for fragment in case.fragments:
        assert fragment in message


def test_a_condition_over_several_parameters_blames_the_one_given_last():
    registry = Registry(
        [COUNT, RATIO, FLAG],
        [
            Condition(
                ("G.flag", "G.count", "G.ratio"),
                lambda flag, count, ratio: not flag or count * ratio < 10,
                lambda flag, count, ratio: f"count x ratio is {count * ratio:g}",
            )
        ],
    )
    Settings(registry, {"G.count": 100, "G.ratio": 1.0})  # holds while the flag is off
    with pytest.raises(RelationError) as caught:
        Settings(registry, {"G.flag": True, "G.count": 30})
    assert caught.value.parameter.key == "G.count"
    assert str(caught.value) == "count x ratio is 15"
    with pytest.raises(RelationError) as caught:
        Settings(registry, {"G.count": 30, "G.flag": True})
    assert caught.value.parameter.key == "G.flag"


def test_the_ha_rule_never_repeats_a_storage_password(tmp_path):
    path = config_file(
        tmp_path,
        (
            '<PersQueueFileStore storageuri="postgresql://wiremq:s3cret@db:5432/mq"/>',
            '<TopicFileStore storageuri="file:///var/lib/wiremq/topics.fs"/>',
            '<HA enabled="true"/>',
        ),
    )
    message = str(config_error(path))
    assert message.startswith(f"{path}:5: HA.enabled: "), message
    assert "TopicFileStore.storageuri (a file:// URI)" in message
    assert "PersQueueFileStore.storageuri (" not in message  # that one is fine
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("lines", "overrides", "message"),
    [
        (
            (),
            {"MessageSpool.usageclearpercent": "90"},
            "command line: MessageSpool.usageclearpercent: 90 is above "
            "MessageSpool.usagesetpercent (80)",
        ),
        (
            ('<VolQueueStoreImpl msghighwatermark="100" msglowwatermark="50"/>',),
            {"VolQueueStoreImpl.msghighwatermark": "-1"},
            "command line: VolQueueStoreImpl.msghighwatermark: -1 switches it off but "
            "VolQueueStoreImpl.msglowwatermark is set (50)",
        ),
    ],
)
def test_a_broken_rule_on_the_command_line_names_it(tmp_path, lines, overrides, message):
    assert message in str(config_error(config_file(tmp_path, lines), overrides))


def test_rules_are_checked_once_every_value_is_given(tmp_path):
    path = config_file(tmp_path, ('<VolQueueStoreImpl msghighwatermark="100"/>',))
    config = load_config(path, {"VolQueueStoreImpl.msglowwatermark": "100"})
    assert config.settings.get("VolQueueStoreImpl", "msglowwatermark") == 100  # low == high: ok


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"P.low": 7, "P.high": 7},
        {"P.low": -1, "P.high": -1},
    ],
)
def test_values_that_keep_the_rules_are_taken(values):
    assert Settings(ORDERED, values).get("P", "low") == values.get("P.low", 1)


@pytest.mark.parametrize(
    ("values", "blamed", "problem"),
    [
        ({"P.low": 9}, "P.low", "9 is above P.high (5)"),
        ({"P.low": 9, "P.high": 8}, "P.high", "8 is below P.low (9)"),
        ({"P.high": -1}, "P.high", "-1 switches it off but P.low is set (1)"),
        ({"P.low": -1}, "P.low", "-1 switches it off but P.high is set (5)"),
    ],
)
def test_settings_refuse_values_that_break_a_rule(values, blamed, problem):
    with pytest.raises(RelationError) as caught:
        Settings(ORDERED, values)
    assert caught.value.parameter.key == blamed
    assert str(caught.value).startswith(problem)


def test_a_rule_the_defaults_break_or_naming_an_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="the defaults break"):
        Registry([LOW, HIGH], [Order("P.high", "P.low", "backwards")])
    with pytest.raises(ValueError, match="unknown parameter P.nope"):
        Registry([LOW, HIGH], [Order("P.low", "P.nope", "no such parameter")])


def test_rendered_config_loads_back_to_the_same_settings(tmp_path):
    settings = Settings(
        REGISTRY,
        {
            "StompListener.port": 1234,
            "StompListener.heartbeatgrace": 1.5,
            "Server.loglevel": "debug",
            "Server.datadir": "/srv/a <b> & 'c'",
        },
    )
    pipelines = {
        "p2p": [ModuleSpec(n, False, "x") for n in ("storage", "distributing")],
        "pubsub": [ModuleSpec("my.mod:Cls", True, "x"), ModuleSpec("storage", False, "x")],
    }
    path = tmp_path / "config.xml"
    path.write_text(render_config(settings, pipelines), encoding="utf-8")
    loaded = load_config(path)
    assert loaded.settings.items() == settings.items()
    for domain, specs in pipelines.items():
        assert [(s.reference, s.is_class_path) for s in loaded.pipelines[domain]] == [
            (s.reference, s.is_class_path) for s in specs
        ]


def test_rendered_default_config_documents_every_parameter():
    text = render_config(Settings(REGISTRY))
    for param in REGISTRY:
        assert f"<!-- {param.name}: {param.doc}" in text


def test_rendered_config_keeps_float_precision(tmp_path):
    settings = Settings(REGISTRY, {"StompListener.heartbeatgrace": 1.2345678})
    path = tmp_path / "config.xml"
    path.write_text(render_config(settings), encoding="utf-8")
    assert load_config(path).settings.get("StompListener", "heartbeatgrace") == 1.2345678
