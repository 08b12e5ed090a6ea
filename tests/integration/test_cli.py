"""The ``wiremq`` command as an operator uses it: a real process, real signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.clients import connect, free_port
from tests.integration.console import Api
from tests.relations import CASES, config_file
from wiremq.config.xmlconfig import load_config
from wiremq.modules.security.users import UsersFile

WIREMQ = [sys.executable, "-m", "wiremq.server.cli"]


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1].decode()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"server did not listen on {port}")


def test_help_explains_the_commands():
    result = subprocess.run([*WIREMQ, "--help"], capture_output=True, text=True, check=True)
    for word in ("serve", "default-config", "parameters", "STOMP"):
        assert word in result.stdout
    serve_help = subprocess.run(
        [*WIREMQ, "serve", "--help"], capture_output=True, text=True, check=True
    )
    for flag in ("--config", "--host", "--port", "--data", "--set"):
        assert flag in serve_help.stdout


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_runs_until_a_signal_and_stops_cleanly(tmp_path, stop):
    port, admin_port = free_port(), free_port()
    data = tmp_path / "data"
    process = subprocess.Popen(
        [*WIREMQ, "serve", "--port", str(port), "--data", str(data)]
        + ["--admin-port", str(admin_port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        # As from a terminal: a suite started in the background has SIGINT ignored, and a
        # child keeps that (the server then rightly leaves SIGINT alone).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_listening(port, process)
        connection, recorder = connect(port)
        connection.subscribe("/queue/cli", id="1")
        connection.send("/queue/cli", "through a real process")
        assert recorder.wait_for_messages(1)[0].body == "through a real process"
        overview = Api(admin_port).get("/api/overview")
        assert overview["server"]["stomp_port"] == port
        assert overview["totals"]["received"] == 1
        process.send_signal(stop)
        assert process.wait(timeout=15) == 0
        assert recorder.wait_until(lambda: recorder.disconnected)
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert data.is_dir()
    assert b"server.listening" in stderr and b"server.stopping" in stderr
    assert b"Traceback" not in stderr


def test_a_config_error_names_file_line_parameter_and_range(tmp_path):
    config = tmp_path / "config.xml"
    config.write_text('<wiremq>\n  <StompListener\n    port="70000"/>\n</wiremq>\n')
    result = subprocess.run(
        [*WIREMQ, "serve", "--config", str(config), "--admin-port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"{config}:2: StompListener.port" in result.stderr
    assert "from 0 to 65535" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_serve_refuses_a_broken_rule_between_two_parameters(tmp_path, case):
    config = config_file(tmp_path, case.lines)
    result = subprocess.run(
        [*WIREMQ, "serve", "--config", str(config), "--port", "0", "--data", str(tmp_path)]
        + ["--admin-port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert f"{config}:{case.line}: {case.parameter}: " in result.stderr
    for fragment in case.fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_broken_rule_given_with_set(tmp_path):
    result = subprocess.run(
        [*WIREMQ, "serve", "--port", "0", "--data", str(tmp_path), "--admin-port", "0"]
        + ["--set", "SlowSubscriber.warnshare=0.95"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert (
        "command line: SlowSubscriber.warnshare: 0.95 is above SlowSubscriber.disconnectshare (0.9)"
        in result.stderr
    )


def test_a_busy_port_is_reported_without_a_traceback(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [*WIREMQ, "serve", "--port", str(port), "--data", str(tmp_path), "--admin-port", "0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
    assert "Traceback" not in result.stderr


def test_default_config_is_a_valid_config_with_every_parameter(tmp_path):
    text = subprocess.run(
        [*WIREMQ, "default-config"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tmp_path / "config.xml")
    path.write_text(text.replace('maxnummessages="5000"', 'maxnummessages="77"', 1))
    from wiremq.config.parameters import REGISTRY
    from wiremq.config.xmlconfig import load_config

    settings = load_config(path).settings
    assert settings.get("P2PPrioQueue", "maxnummessages") == 77
    for parameter in REGISTRY:
        assert f"{parameter.name}=" in text
    reference = subprocess.run(
        [*WIREMQ, "parameters"], capture_output=True, text=True, check=True
    ).stdout
    assert all(parameter.key in reference for parameter in REGISTRY)


def test_passwd_adds_changes_and_removes_users_with_the_password_from_stdin(tmp_path):
    data = tmp_path / "data"

    def passwd(*args: str, password: str = "") -> subprocess.CompletedProcess[str]:
        command = [*WIREMQ, "passwd", *args, "--data", str(data)]
        return subprocess.run(command, input=password, capture_output=True, text=True)

    added = passwd("alice", "--role", "operator", password="s3cret\n")
    assert added.returncode == 0 and "added" in added.stdout, added.stderr
    no_role = passwd("bob", password="pw\n")
    assert no_role.returncode == 2 and "give its role" in no_role.stderr
    changed = passwd("alice", password="n3w\n")
    assert changed.returncode == 0 and "changed" in changed.stdout
    users = UsersFile(data).load()
    assert users["alice"].role == "operator" and users["alice"].verify("n3w")
    assert passwd("alice", "--delete").returncode == 0
    gone = passwd("alice", "--delete")
    assert gone.returncode == 1 and "no user 'alice'" in gone.stderr
    assert UsersFile(data).load() == {}


def test_the_log_level_changes_while_the_server_runs(tmp_path):
    port, admin_port = free_port(), free_port()
    process = subprocess.Popen(
        [*WIREMQ, "serve", "--port", str(port), "--data", str(tmp_path)]
        + ["--admin-port", str(admin_port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process)
        api = Api(admin_port).with_csrf()
        sessions = []
        for level in ("info", "warning", "info"):
            api.set_parameter("Server.loglevel", level)
            connection, _ = connect(port)
            sessions.append(connection.get_listener("recorder"))
            connection.disconnect()
        events = [
            e["session"]
            for e in api.get("/api/events?limit=1000")["events"]
            if e["event"] == "client.connected"
        ]
        assert len(events) == 3, "the event stream keeps every event, whatever the level"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        _, stderr = process.communicate()
    written = stderr.decode()
    shown = [session for session in events if f"session={session}" in written]
    assert shown == [events[0], events[2]], "the second client connected at level warning"


def test_config_check_names_every_problem_and_passes_a_good_file(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(
        "<wiremq>\n"
        '  <StompListener port="70000" maxheaders="many"/>\n'
        '  <P2PStore maxdelay="5" colour="red"/>\n'
        '  <VolQueueStoreImpl globalbytelowwatermark="20000000"/>\n'
        "</wiremq>\n"
    )
    result = subprocess.run([*WIREMQ, "config", "check", str(bad)], capture_output=True, text=True)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"{bad}:2: StompListener.port: 70000 is out of range: expected a whole number from 0 "
        "to 65535, or -1 to switch it off",
        f"{bad}:2: StompListener.maxheaders: 'many' is not valid: expected a whole number from "
        "1 to 100000",
        f"{bad}:3: P2PStore.colour: unknown parameter; known parameters: maxdelay, "
        "maxdelayedmessagesnumber, maxdelayedmessagessize",
        f"{bad}:4: VolQueueStoreImpl.globalbytelowwatermark: 20000000 is above "
        "VolQueueStoreImpl.globalbytehighwatermark (16000000); a watermark stops producers at "
        "its high and starts them again at its low",
    ]
    pipeline = tmp_path / "pipeline.xml"
    pipeline.write_text(
        '<wiremq>\n<Pipeline domain="p2p">\n<module name="storage"/>\n</Pipeline>\n</wiremq>\n'
    )
    result = subprocess.run(
        [*WIREMQ, "config", "check", str(pipeline)], capture_output=True, text=True
    )
    assert result.returncode == 1 and "needs the 'admission' module" in result.stderr
    good = tmp_path / "good.xml"
    good.write_text('<wiremq><StompListener port="1234"/></wiremq>\n')
    result = subprocess.run([*WIREMQ, "config", "check", str(good)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == f"{good}: valid\n"


def test_config_show_prints_every_value_with_its_unit_and_marks_what_differs(tmp_path):
    config = tmp_path / "config.xml"
    config.write_text('<wiremq><P2PStore maxdelay="9"/></wiremq>\n')
    result = subprocess.run(
        [*WIREMQ, "config", "show", "--config", str(config), "--set", "StompListener.port=7"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert f"({config} and the command line)" in lines[0]
    assert "* maxdelay                 = 9 ms   (default 5)" in lines
    assert "* port                     = 7   (default 61613)" in lines
    assert any(line.startswith("  maxdelayedmessagessize   = 131072 bytes") for line in lines)
    assert "[Pipeline p2p] admission > transaction > prioqueue > storage > distributing" in lines


def test_the_wizard_writes_the_manuals_allocation_with_its_reasons(tmp_path):
    output = tmp_path / "config.xml"
    output.write_text('<wiremq>\n  <!-- mine -->\n  <StompListener port="7000"/>\n</wiremq>\n')
    result = subprocess.run(
        [*WIREMQ, "wizard", "--output", str(output)], capture_output=True, text=True, check=True
    )
    printed = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[:-1]}
    assert printed["VolQueueStoreImpl.globalbytehighwatermark"] == "16000000"
    assert printed["QueueThreadPool.maxthreads"] == "4"
    assert "never fewer than 4" in result.stdout
    assert "not a parameter of this server" in result.stdout  # e.g. MemWatch, until it exists
    settings = load_config(output).settings
    assert settings.get("StompListener", "port") == 7000, "its other settings are kept"
    assert settings.get("P2PPrioQueue", "maxnumbytes") == 262144
    assert "<!-- mine -->" in output.read_text()
    assert output.with_name("config.xml.bak").read_text().count("StompListener") == 1
    larger = subprocess.run(
        [*WIREMQ, "wizard", "--heap", "1024", "--dry-run", "--output", str(output)],
        capture_output=True,
        text=True,
        check=True,
    )
    values = {line.split()[0]: line.split()[1] for line in larger.stdout.splitlines()}
    assert values["VolQueueStoreImpl.globalbytehighwatermark"] == "64000000"
    bad = subprocess.run(
        [*WIREMQ, "wizard", "--threads", "30", "--connections", "20"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "must be more than the connections plus 20" in bad.stderr


def test_a_change_waiting_for_a_restart_is_in_force_after_it(tmp_path):
    """Without --config the console saves to config.xml in the data folder, and the next
    start reads it."""

    def start() -> tuple[subprocess.Popen[bytes], Api]:
        port, admin_port = free_port(), free_port()
        process = subprocess.Popen(
            [*WIREMQ, "serve", "--port", str(port), "--data", str(tmp_path)]
            + ["--admin-port", str(admin_port)],
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        _wait_listening(port, process)
        return process, Api(admin_port).with_csrf()

    process, api = start()
    try:
        changed = api.set_parameter("ClientEgress.maxdepth", 500)
        assert changed["applied"] is False and changed["value"] == 20000
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        process, api = start()
        again = api.get("/api/parameters/ClientEgress.maxdepth")
        assert again["value"] == 500 and again["restart_needed"] is False
    finally:
        process.kill()
        process.wait()
    assert (tmp_path / "config.xml").is_file()


def test_grant_revoke_and_users_change_and_show_groups_and_permissions(tmp_path):
    data = tmp_path / "data"

    def wiremq(*args: str, password: str = "") -> subprocess.CompletedProcess[str]:
        command = [*WIREMQ, *args, "--data", str(data)]
        return subprocess.run(command, input=password, capture_output=True, text=True)

    assert "every client may do everything" in wiremq("users").stdout
    assert (
        wiremq("passwd", "alice", "--role", "viewer", "--groups", "t", password="pw\n").returncode
        == 0
    )
    assert wiremq("grant", "--user", "alice", "/queue/a.>", "read", "write").returncode == 0
    assert wiremq("grant", "--group", "t", "/topic/p.*", "admin").returncode == 0
    listed = wiremq("users").stdout
    assert "user alice (viewer) groups t\n  /queue/a.>: read write" in listed
    assert "group t\n  /topic/p.*: admin" in listed
    assert wiremq("revoke", "--user", "alice", "/queue/a.>", "write").returncode == 0
    assert [g.permissions for g in UsersFile(data).load()["alice"].permissions] == [["read"]]
    nothing = wiremq("revoke", "--group", "t", "/queue/none")
    assert nothing.returncode == 1 and "had none" in nothing.stderr
    bad = wiremq("grant", "--group", "t", "queue", "read")
    assert bad.returncode == 2 and "destination pattern 'queue'" in bad.stderr
    unknown = wiremq("grant", "--user", "bob", "/queue/a", "read")
    assert unknown.returncode == 2 and "no user 'bob'" in unknown.stderr
    assert UsersFile(data).load()["alice"].groups == ("t",)
