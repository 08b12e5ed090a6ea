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
from tests.relations import CASES, config_file
from wiremq.modules.users import UsersFile

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
    port = free_port()
    data = tmp_path / "data"
    process = subprocess.Popen(
        [*WIREMQ, "serve", "--port", str(port), "--data", str(data)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        _wait_listening(port, process)
        connection, recorder = connect(port)
        connection.subscribe("/queue/cli", id="1")
        connection.send("/queue/cli", "through a real process")
        assert recorder.wait_for_messages(1)[0].body == "through a real process"
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
        [*WIREMQ, "serve", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert f"{config}:2: StompListener.port" in result.stderr
    assert "from 0 to 65535" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_serve_refuses_a_broken_rule_between_two_parameters(tmp_path, case):
    config = config_file(tmp_path, case.lines)
    result = subprocess.run(
        [*WIREMQ, "serve", "--config", str(config), "--port", "0", "--data", str(tmp_path)],
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
        [*WIREMQ, "serve", "--port", "0", "--data", str(tmp_path)]
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
            [*WIREMQ, "serve", "--port", str(port), "--data", str(tmp_path)],
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
