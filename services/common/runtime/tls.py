"""Transport security between the mesh's services: TLS and mutual TLS from PEM files.

Every service takes the same three settings (``ServiceSettings``): ``tls_cert_file`` and
``tls_key_file`` (this service's identity: its server certificate, and its client certificate
when it calls other services) and ``tls_ca_file`` (the CA the mesh's certificates chain to: a
client verifies servers against it; with ``tls_client_auth`` a server requires a client
certificate signed by it). In Kubernetes the files are mounted from Secrets.

A process's outgoing channels all use one client identity, installed at service start
(``configure_client``) and read by ``services.common.runtime.clients.open_channel``. Key material is
read once, never logged, and never part of an error message (errors name the setting and path).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsError(ValueError):
    """A TLS setting is inconsistent or one of its files cannot be read (names the setting)."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM contents of a service's TLS settings (all bytes; empty when not configured)."""

    cert: bytes = b""
    key: bytes = b""
    ca: bytes = b""
    client_auth: bool = False

    @property
    def serves(self) -> bool:
        """Whether the service's port is TLS (it has a certificate)."""
        return bool(self.cert)

    @property
    def calls(self) -> bool:
        """Whether outgoing channels are TLS (a certificate or a CA to verify peers)."""
        return bool(self.cert or self.ca)

    def __repr__(self) -> str:  # never print key material
        return (f"TlsFiles(cert={len(self.cert)} B, key={'set' if self.key else 'unset'}, "
                f"ca={len(self.ca)} B, client_auth={self.client_auth})")


def _read(setting: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{setting}: {path} is not a PEM file")
    return data


def load(cert_file: str = "", key_file: str = "", ca_file: str = "",
         client_auth: bool = False) -> TlsFiles:
    """Read and check a service's TLS files: a certificate needs its key (and the reverse);
    client authentication needs the CA that signs client certificates."""
    if bool(cert_file) != bool(key_file):
        raise TlsError("tls_cert_file and tls_key_file: set both or neither")
    if client_auth and not ca_file:
        raise TlsError("tls_client_auth: needs tls_ca_file (the CA of client certificates)")
    if client_auth and not cert_file:
        raise TlsError("tls_client_auth: needs tls_cert_file and tls_key_file (this service's "
                       "own certificate, presented to its peers)")
    return TlsFiles(cert=_read("tls_cert_file", cert_file) if cert_file else b"",
                    key=_read("tls_key_file", key_file) if key_file else b"",
                    ca=_read("tls_ca_file", ca_file) if ca_file else b"",
                    client_auth=client_auth)


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Credentials of a TLS server port (mutual when ``client_auth``)."""
    if not files.cert:
        raise TlsError("tls_cert_file: required to serve TLS")
    return grpc.ssl_server_credentials(
        [(files.key, files.cert)], root_certificates=files.ca or None,
        require_client_auth=files.client_auth)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Credentials of an outgoing channel: verify the server against the CA (the system roots
    when none is set) and present this service's certificate when it has one."""
    return grpc.ssl_channel_credentials(
        root_certificates=files.ca or None, private_key=files.key or None,
        certificate_chain=files.cert or None)


_client = TlsFiles()


def configure_client(files: TlsFiles) -> None:
    """Install the process's client identity for every channel opened after this call."""
    global _client
    _client = files


def client_files() -> TlsFiles:
    """The process's client identity (disabled until a TLS service configures it)."""
    return _client


__all__ = ["TlsError", "TlsFiles", "channel_credentials", "client_files", "configure_client",
           "load", "server_credentials"]
