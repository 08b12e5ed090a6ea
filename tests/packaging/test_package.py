"""The package as a user installs it: ``python -m build`` makes an sdist and a wheel that
compile the C parts; the wheel, installed into a fresh venv, serves STOMP and the console;
the systemd unit of ``packaging/`` is valid and sandboxed."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from tests.integration.clients import connect, free_port
from tests.integration.console import Api
from tests.integration.test_cli import _wait_listening

ROOT = Path(__file__).resolve().parents[2]
C_PARTS = (
    "modules/stomp/_fast",
    "server/_syncthread",
    "modules/journal/_encode",
    "modules/selector/_number",
    "modules/_message",
)
UNIT = ROOT / "packaging" / "wiremq.service"
EXPOSURE_AT_MOST = 2.0  # systemd-analyze security: 0 (sandboxed) .. 10 (exposed)


def _version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def _run(*command: str | Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-4000:]}"
    return done.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_serves_stomp_and_the_console(tmp_path):
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    version = _version()
    (sdist,) = dist.glob(f"wiremq-{version}.tar.gz")
    (wheel,) = dist.glob(f"wiremq-{version}-*.whl")  # built from the sdist
    with tarfile.open(sdist) as archive:
        sources = set(archive.getnames())
    assert {f"wiremq-{version}/{part}.c" for part in C_PARTS} <= sources
    assert f"wiremq-{version}/packaging/wiremq.service" in sources
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for part in C_PARTS:
        assert any(n.startswith(f"wiremq/{part}") and n.endswith(".so") for n in names), part
    assert "wiremq/admin/static/console.js" in names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "pip", "install", "--quiet", wheel)
    wiremq = venv / "bin" / "wiremq"
    assert _run(wiremq, "--version").strip() == f"wiremq {version}"
    _run(
        venv / "bin" / "python",
        "-c",
        "import wiremq.modules.stomp._fast, wiremq.server._syncthread, "
        "wiremq.modules.journal._encode, wiremq.modules.selector._number",
    )

    port, admin_port = free_port(), free_port()
    server = subprocess.Popen(
        [wiremq, "serve", "--port", str(port), "--admin-port", str(admin_port)]
        + ["--data", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(port, server, timeout=60)
        consumer, recorder = connect(port)
        consumer.subscribe("/queue/installed", id="1", headers={"receipt": "s"})
        assert recorder.wait_until(lambda: "s" in recorder.receipts)
        consumer.send("/queue/installed", "round trip", headers={"persistent": "true"})
        (message,) = recorder.wait_for_messages(1)
        assert message.body == "round trip"
        consumer.disconnect()
        console = Api(admin_port)
        page = console.request("GET", "/")
        assert page.status == 200 and b"console.js" in page.body
        assert console.request("GET", "/static/console.js").status == 200
        document = console.get("/api/openapi.json")
        assert document["info"]["version"] == version
    finally:
        server.send_signal(signal.SIGTERM)
        _, errors = server.communicate(timeout=60)
    assert server.returncode == 0, errors.decode()[-3000:]
    _check_unit(tmp_path, wiremq)


def _check_unit(tmp_path: Path, wiremq: Path) -> None:
    """The unit, pointed at the wiremq just installed, passes ``systemd-analyze verify``, and
    its sandbox rates at most EXPOSURE_AT_MOST."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is needed to check packaging/wiremq.service"
    unit = tmp_path / "wiremq.service"
    unit.write_text(UNIT.read_text().replace("/opt/wiremq/bin/wiremq", str(wiremq)))
    verified = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    rated = _run(analyze, "security", "--offline=true", unit)
    exposure = re.search(r"Overall exposure level for wiremq.service: ([\d.]+)", rated)
    assert exposure is not None, rated[-2000:]
    assert float(exposure.group(1)) <= EXPOSURE_AT_MOST, rated
