"""TLS and mutual TLS between services: certificates from files; a client without a valid
certificate is refused; key material never reaches the logs or an error."""

from __future__ import annotations

import datetime
import ipaddress
import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.common.runtime import tls
from services.common.runtime.clients import wait_serving
from services.common.runtime.tls import TlsError, TlsFiles
from services.csl.client import CslClient
from services.csl.config import CslSettings
from services.csl.server import build_runtime


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(subject: str, issuer_key: ec.EllipticCurvePrivateKey | None = None,
           issuer: x509.Name | None = None, ca: bool = False
           ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject))
               .issuer_name(issuer or _name(subject)).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return key, builder.sign(issuer_key or key, hashes.SHA256())


def _write(folder: Path, stem: str, key: ec.EllipticCurvePrivateKey,
           cert: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = folder / f"{stem}.key", folder / f"{stem}.crt"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    """A mesh CA, a service certificate it signed, and a rogue CA's certificate."""
    ca_key, ca_cert = _issue("dynbranch-ca", ca=True)
    _write(tmp_path, "ca", ca_key, ca_cert)
    svc_key, svc_cert = _issue("csl", ca_key, ca_cert.subject)
    rogue_ca_key, rogue_ca = _issue("rogue-ca", ca=True)
    rogue_key, rogue_cert = _issue("rogue", rogue_ca_key, rogue_ca.subject)
    cert, key = _write(tmp_path, "svc", svc_key, svc_cert)
    rogue_crt, rogue_k = _write(tmp_path, "rogue", rogue_key, rogue_cert)
    return {"ca": str(tmp_path / "ca.crt"), "cert": cert, "key": key,
            "rogue_cert": rogue_crt, "rogue_key": rogue_k, "dir": str(tmp_path)}


@pytest.fixture(autouse=True)
def plaintext_after() -> Iterator[None]:
    """The process's client identity is global: leave it plaintext for the other tests."""
    yield
    tls.configure_client(TlsFiles())


def _settings(pki: dict[str, str], **extra: object) -> CslSettings:
    return CslSettings(data_dir=str(Path(pki["dir"]) / "csl"), metrics_port=-1, grace_s=0.1,
                       tls_cert_file=pki["cert"], tls_key_file=pki["key"],
                       tls_ca_file=pki["ca"], **extra)


async def _stats_with(files: TlsFiles | None, address: str) -> grpc.StatusCode | None:
    """Call Stats with a given client identity (None: plaintext); the status code or None."""
    tls.configure_client(files or TlsFiles())
    client = CslClient(address)
    try:
        await client.stats(timeout_s=3.0)
        return None
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await client.close()


async def test_mutual_tls_admits_mesh_certificates_and_refuses_the_rest(
        pki: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    runtime = await build_runtime(_settings(pki, tls_client_auth=True, log_level="DEBUG"))
    await runtime.start()
    try:
        own = runtime.tls
        await wait_serving(runtime.address, timeout_s=10)  # over mTLS, as the process's client
        assert await _stats_with(own, runtime.address) is None
        no_cert = TlsFiles(ca=own.ca)
        assert await _stats_with(no_cert, runtime.address) == grpc.StatusCode.UNAVAILABLE
        rogue = tls.load(pki["rogue_cert"], pki["rogue_key"], pki["ca"])
        assert await _stats_with(rogue, runtime.address) == grpc.StatusCode.UNAVAILABLE
        assert await _stats_with(None, runtime.address) == grpc.StatusCode.UNAVAILABLE
    finally:
        await runtime.shutdown()
    secret = Path(pki["key"]).read_text().splitlines()[1]  # a line of the key's base64
    assert secret not in caplog.text and "PRIVATE KEY" not in caplog.text
    assert "PRIVATE" not in repr(own) and secret not in repr(own)


async def test_server_only_tls_verifies_the_server_for_any_client(pki: dict[str, str]) -> None:
    runtime = await build_runtime(_settings(pki))
    await runtime.start()
    try:
        assert await _stats_with(TlsFiles(ca=runtime.tls.ca), runtime.address) is None
        assert await _stats_with(None, runtime.address) == grpc.StatusCode.UNAVAILABLE
        other_ca = TlsFiles(ca=Path(pki["rogue_cert"]).read_bytes())  # not the server's CA
        assert await _stats_with(other_ca, runtime.address) == grpc.StatusCode.UNAVAILABLE
    finally:
        await runtime.shutdown()


def test_tls_settings_errors_name_the_setting_and_never_the_key(pki: dict[str, str],
                                                                tmp_path: Path) -> None:
    with pytest.raises(TlsError, match="tls_cert_file and tls_key_file"):
        tls.load(pki["cert"], "")
    with pytest.raises(TlsError, match="tls_client_auth: needs tls_ca_file"):
        tls.load(pki["cert"], pki["key"], client_auth=True)
    with pytest.raises(TlsError, match="tls_key_file: cannot read"):
        tls.load(pki["cert"], str(tmp_path / "missing.key"))
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(TlsError, match="tls_ca_file: .*junk.pem is not a PEM file"):
        tls.load(ca_file=str(tmp_path / "junk.pem"))


def test_a_service_with_an_unreadable_key_exits_2_naming_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture
                                                             ) -> None:
    from services.csl.server import main

    cert = tmp_path / "c.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    code = main(["--set", f"data_dir={tmp_path / 'csl'}", "--set", f"tls_cert_file={cert}",
                 "--set", f"tls_key_file={tmp_path / 'nope.key'}", "--metrics-port", "-1"])
    assert code == 2
    assert "tls_key_file: cannot read" in capsys.readouterr().err


async def test_probes_read_health_on_a_plaintext_port_while_the_service_is_mtls(
        pki: dict[str, str]) -> None:
    """Kubernetes gRPC probes cannot speak TLS: health alone is served in plaintext on
    ``health_port`` and follows the service's status; nothing else is reachable there."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    runtime = await build_runtime(_settings(pki, tls_client_auth=True, health_port=0))
    await runtime.start()
    probe = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.health_port}")
    try:
        check = health_pb2_grpc.HealthStub(probe).Check
        reply = await check(health_pb2.HealthCheckRequest(), timeout=3)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stats = probe.unary_unary("/dynbranch.v1.SubgraphLibrary/Stats")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stats(b"", timeout=3)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED  # health only
        await runtime.health.enter_graceful_shutdown()
        reply = await check(health_pb2.HealthCheckRequest(), timeout=3)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await probe.close()
        await runtime.shutdown()
