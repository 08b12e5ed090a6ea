"""TLS for the server's listeners: the certificate, the key and the client certificates.

One ``TlsContextFactory`` serves every TLS listener (STOMP, secure WebSocket,
and the admin console's when it has one), built from the ``TLS`` parameters:
the certificate and any intermediate certificates from ``certfile``, the key
from ``keyfile``, TLS 1.2 or newer (``minimumversion``). With
``clientcertificates`` ``optional`` or ``required``, a client's certificate
must be signed by an authority of ``cafile`` (a bad one fails the handshake);
``certificate_name`` then gives the user name it carries (its subject's common
name), which stands in for a login.
"""

from __future__ import annotations

from typing import Any

from cryptography.x509.oid import NameOID
from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLContextFactory
from twisted.internet.tcp import Connection
from twisted.protocols.tls import TLSMemoryBIOProtocol
from zope.interface import implementer

from wiremq.config.groups import TlsSettings
from wiremq.config.xmlconfig import ConfigError

_VERSIONS = {"1.2": SSL.TLS1_2_VERSION, "1.3": SSL.TLS1_3_VERSION}
_CLIENT_CERTIFICATES = {
    "none": SSL.VERIFY_NONE,
    "optional": SSL.VERIFY_PEER,
    "required": SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT,
}


@implementer(IOpenSSLContextFactory)
class TlsContextFactory:
    """The OpenSSL context of the server's TLS listeners (see the module docstring).

    The files are read when it is made, so that a missing file, or a key that is
    not the certificate's, stops the server at start with an error naming the
    parameter and file."""

    def __init__(self, settings: TlsSettings, where: str) -> None:
        """``where``: the configuration the settings come from, for errors."""
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(_VERSIONS[settings.minimumversion])
        context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
        if not settings.certfile or not settings.keyfile:
            raise ConfigError(
                where, "a TLS listener needs a certificate and its key", "TLS.certfile/keyfile"
            )
        _load(where, "TLS.certfile", settings.certfile, context.use_certificate_chain_file)
        _load(where, "TLS.keyfile", settings.keyfile, context.use_privatekey_file)
        if settings.clientcertificates != "none":
            if not settings.cafile:
                raise ConfigError(
                    where,
                    f"client certificates are {settings.clientcertificates} but no file names "
                    "the authorities that sign them",
                    "TLS.cafile",
                )
            _load(where, "TLS.cafile", settings.cafile, context.load_verify_locations)
            # Sessions resumed with a client certificate need an id of this server's.
            context.set_session_id(b"wiremq")
        context.set_verify(_CLIENT_CERTIFICATES[settings.clientcertificates])
        self.context = context

    def getContext(self) -> SSL.Context:
        return self.context


def _load(where: str, parameter: str, path: str, load: Any) -> None:
    try:
        load(path)
    except SSL.Error as error:
        raise ConfigError(where, f"cannot use {path}: {_reason(error)}", parameter) from None


def _reason(error: SSL.Error) -> str:
    """OpenSSL's reasons, in words ("no such file", "no start line": not PEM)."""
    reasons = [part[2] for part in error.args[0] if len(part) == 3] if error.args else []
    return "; ".join(r for r in reasons if r) or str(error)


def certificate_name(transport: Any) -> str | None:
    """The common name of the verified certificate the client on ``transport`` (a TLS
    transport, or a transport over one) presented; None without one."""
    while not isinstance(transport, TLSMemoryBIOProtocol):
        if isinstance(transport, Connection) or transport is None:
            return None
        transport = transport.transport
    certificate = transport.getPeerCertificate()
    if certificate is None:
        return None
    names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None
