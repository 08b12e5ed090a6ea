"""STOMP over TLS: stomp.py, Python's ssl client and openssl s_client; client certificates;
the console over HTTPS.

Certificates are made for the run (``certificates.py``): an authority, the
server's (localhost, 127.0.0.1), alice's, and a stranger's that claims to be
alice but is signed by another authority.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import stomp

from tests.integration.certificates import Certificates, Pem, make_certificates
from tests.integration.clients import TIMEOUT, RawClient, Recorder
from tests.integration.console import Api, open_console
from tests.integration.test_early_receipts import sent_at_the_sync
from wiremq.config.groups import TlsSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import ConfigError
from wiremq.modules.security.users import UsersFile
from wiremq.server.tls import TlsContextFactory


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def tls(certificates: Certificates, **more: str) -> dict[str, str]:
    """Overrides that open the TLS listener with the test certificate."""
    return {
        "StompListener.tlsport": "0",
        "TLS.certfile": str(certificates.server.cert),
        "TLS.keyfile": str(certificates.server.key),
        **more,
    }


def client_certificates(certificates: Certificates, mode: str) -> dict[str, str]:
    return {"TLS.clientcertificates": mode, "TLS.cafile": str(certificates.ca)}


class TlsClient(RawClient):
    """A raw STOMP client over Python's ssl module, checking the server's certificate."""

    def __init__(
        self,
        port: int,
        ca: Path,
        identity: Pem | None = None,
        maximum: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
    ) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.maximum_version = maximum
        if identity is not None:
            context.load_cert_chain(str(identity.cert), str(identity.key))
        plain = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        super().__init__(port, sock=context.wrap_socket(plain, server_hostname="127.0.0.1"))


def users_with_alice(start_server_data: Path) -> UsersFile:
    users = UsersFile(start_server_data)
    users.set("alice", "alice-pw", "viewer")
    users.grant("alice", None, "/queue/alice", ["read", "write", "create"])
    return users


def test_persistent_receipts_over_tls_go_through_the_event_loop(
    reactor, start_server, certificates
):
    """The sync thread sends receipts to plain TCP sockets only: over TLS the event loop
    encrypts them as it does everything else."""
    server = start_server(**tls(certificates))
    client = TlsClient(server.ports["stomp+ssl"], certificates.ca)
    client.connect()
    for i in range(5):
        client.send(
            f"SEND\ndestination:/queue/tls\npersistent:true\nreceipt:t{i}\n\n{i}\0".encode()
        )
        assert client.next_frame().headers["receipt-id"] == f"t{i}"
    assert server.store.count("/queue/tls")[0] == 5
    assert sent_at_the_sync(reactor, server) == 0
    client.close()


def test_stomp_py_exchanges_messages_over_tls(start_server, certificates):
    server = start_server(**tls(certificates))
    port = server.ports["stomp+ssl"]
    connection = stomp.Connection12([("127.0.0.1", port)], auto_content_length=True)
    connection.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(certificates.ca))
    recorder = Recorder()
    connection.set_listener("recorder", recorder)
    connection.connect(wait=True)
    connection.subscribe("/queue/secure", id="1")
    connection.send("/queue/secure", "over tls", receipt="r")
    assert recorder.wait_for_messages(1)[0].body == "over tls"
    assert recorder.wait_until(lambda: "r" in recorder.receipts)
    connection.disconnect()


def test_pythons_ssl_client_gets_tls_1_2_or_newer_and_an_older_one_is_refused(
    start_server, certificates
):
    server = start_server(**tls(certificates, **{"TLS.minimumversion": "1.3"}))
    port = server.ports["stomp+ssl"]
    client = TlsClient(port, certificates.ca)
    assert client.sock.version() == "TLSv1.3"  # type: ignore[attr-defined]
    assert client.connect().command == "CONNECTED"
    client.close()
    with pytest.raises(ssl.SSLError, match="(?i)protocol version|alert"):
        TlsClient(port, certificates.ca, maximum=ssl.TLSVersion.TLSv1_2)


def test_openssl_s_client_connects_and_verifies_the_server(start_server, certificates):
    server = start_server(**tls(certificates))
    port = server.ports["stomp+ssl"]
    done = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{port}",
            "-CAfile",
            str(certificates.ca),
            "-verify_return_error",
            "-ign_eof",
        ],
        input=b"CONNECT\naccept-version:1.2\n\n\0DISCONNECT\nreceipt:bye\n\n\0",
        capture_output=True,
        timeout=TIMEOUT,
    )
    out = done.stdout.decode(errors="replace")
    assert "Verify return code: 0 (ok)" in out, out
    assert "CONNECTED\nversion:1.2" in out and "receipt-id:bye" in out, out


def test_a_client_certificate_stands_in_for_the_login(start_server, tmp_path, certificates):
    users_with_alice(tmp_path / "data")
    server = start_server(**tls(certificates, **client_certificates(certificates, "required")))
    port = server.ports["stomp+ssl"]
    alice = TlsClient(port, certificates.ca, identity=certificates.client)
    assert alice.connect().command == "CONNECTED"  # no login: the certificate says alice
    alice.send(b"SEND\ndestination:/queue/alice\nreceipt:1\n\nmine\0")
    assert alice.next_frame().headers["receipt-id"] == "1"
    alice.send(b"SEND\ndestination:/queue/bob\nreceipt:2\n\nnot mine\0")
    refused = alice.next_frame()
    assert refused.headers["message"] == "permission denied: write /queue/bob"
    assert "user 'alice'" in refused.body.decode()


def test_openssl_s_client_logs_in_with_its_certificate(start_server, tmp_path, certificates):
    users_with_alice(tmp_path / "data")
    server = start_server(**tls(certificates, **client_certificates(certificates, "optional")))
    done = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{server.ports['stomp+ssl']}",
            "-CAfile",
            str(certificates.ca),
            "-cert",
            str(certificates.client.cert),
            "-key",
            str(certificates.client.key),
            "-ign_eof",
        ],
        input=b"CONNECT\naccept-version:1.2\n\n\0DISCONNECT\nreceipt:bye\n\n\0",
        capture_output=True,
        timeout=TIMEOUT,
    )
    out = done.stdout.decode(errors="replace")
    assert "CONNECTED\nversion:1.2" in out and "receipt-id:bye" in out, out


@pytest.mark.parametrize("who", ["none", "stranger"])
def test_without_a_trusted_certificate_a_required_one_fails_the_handshake(
    start_server, certificates, who
):
    server = start_server(**tls(certificates, **client_certificates(certificates, "required")))
    identity = certificates.stranger if who == "stranger" else None
    try:
        client = TlsClient(server.ports["stomp+ssl"], certificates.ca, identity=identity)
    except (ssl.SSLError, ConnectionError):
        return  # refused in the handshake (TLS 1.2)
    # TLS 1.3 sends the server's verdict after the client's finish: the first read fails
    with contextlib.suppress(ssl.SSLError, ConnectionError):  # or already on the write
        client.send(b"CONNECT\naccept-version:1.2\n\n\0")
    assert client.wait_closed() and not client.frames


def test_with_optional_certificates_a_client_without_one_logs_in_with_a_password(
    start_server, tmp_path, certificates
):
    users_with_alice(tmp_path / "data")
    server = start_server(**tls(certificates, **client_certificates(certificates, "optional")))
    port = server.ports["stomp+ssl"]
    client = TlsClient(port, certificates.ca)
    client.send(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:alice-pw\n\n\0")
    assert client.next_frame().command == "CONNECTED"
    anonymous = TlsClient(port, certificates.ca)
    anonymous.send(b"CONNECT\naccept-version:1.2\n\n\0")
    assert anonymous.next_frame(timeout=5).headers["message"] == "login failed"


def test_tls_only_opens_no_plain_listener(start_server, certificates):
    server = start_server(**tls(certificates, **{"StompListener.port": "-1"}))
    assert set(server.ports) == {"stomp+ssl"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"TLS.certfile": ""}, "TLS.certfile/keyfile: a TLS listener needs a certificate"),
        ({"TLS.certfile": "/nonexistent.pem"}, "TLS.certfile: cannot use /nonexistent.pem"),
        ({"TLS.keyfile": "CA"}, "TLS.keyfile: cannot use .*alice.key: key values mismatch"),
        ({"TLS.clientcertificates": "required"}, "TLS.cafile: client certificates are required"),
    ],
)
def test_a_tls_configuration_that_cannot_work_stops_the_server_naming_the_parameter(
    certificates, values, message
):
    given = {
        "TLS.certfile": str(certificates.server.cert),
        "TLS.keyfile": str(certificates.server.key),
        **values,
    }
    if given["TLS.keyfile"] == "CA":
        given["TLS.keyfile"] = str(certificates.client.key)
    settings = Settings(REGISTRY, given)
    with pytest.raises(ConfigError, match=message):
        TlsContextFactory(TlsSettings.read(settings, "TLS"), "config.xml")


def test_a_certificate_that_names_no_user_is_a_failed_login(start_server, tmp_path, certificates):
    UsersFile(tmp_path / "data").set("bob", "bob-pw", "viewer")  # no alice
    server = start_server(
        **tls(certificates, **client_certificates(certificates, "required")),
        **{"Security.loginfailuredelay": "0.05"},
    )
    alice = TlsClient(server.ports["stomp+ssl"], certificates.ca, identity=certificates.client)
    alice.send(b"CONNECT\naccept-version:1.2\n\n\0")
    refused = alice.next_frame()
    assert refused.headers["message"] == "login failed"
    assert "the certificate names no user" in refused.body.decode()
    assert alice.wait_closed()


def test_the_console_serves_https_only_with_the_same_certificate(
    reactor, start_server, tmp_path, certificates
):
    UsersFile(tmp_path / "data").set("ops", "ops-pw", "admin")
    server = start_server(
        **{
            "Admin.tls": "true",
            "TLS.certfile": str(certificates.server.cert),
            "TLS.keyfile": str(certificates.server.key),
        }
    )
    port = open_console(reactor, server).port
    checked = ssl.create_default_context(cafile=str(certificates.ca))
    api = Api(port, auth=("ops", "ops-pw"), tls=checked)
    assert api.get("/api/session")["user"] == "ops"
    login = Api(port, tls=checked).log_in("ops", "ops-pw")
    assert login.status == 303 and "Secure" in login.headers["set-cookie"]
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that trusts another authority
        Api(port, tls=ssl.create_default_context()).request("GET", "/api/session")
    with pytest.raises((ConnectionError, http.client.HTTPException)):  # plain HTTP: no answer
        Api(port, auth=("ops", "ops-pw")).request("GET", "/api/session")
