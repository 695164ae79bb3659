"""Per-trial mutual TLS for xgboost's federated server: a fresh CA, server and client certs.

Why: xgboost's federated server listens on every interface (``0.0.0.0`` is hard-coded in
its plugin), so without TLS any host that reaches the port could join a trial as a worker
and read every collective message (rank 0's gradients among them). With a server key and
the trial CA as ``client_cert_path`` the server requires and verifies a client certificate
(gRPC's ``REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY``); only the trial's parties
hold one. The CA's private key lives in this process's memory only while the trial's
certificates are issued and is never written anywhere.

Certificates travel as PEM bytes (actors may sit on other nodes, where the driver's paths do
not exist); each side writes what it needs into its own ``private_dir`` (mode 0700, files
0600) because xgboost takes paths, and removes it once xgboost has read them. Keys are EC
P-256: fast to generate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=1)  # a trial's certificates need not outlive it


@dataclass(frozen=True)
class ClientTLS:
    """What one worker needs: the trial CA (to verify the server) and its own key pair."""

    ca_cert: bytes
    key: bytes
    cert: bytes


@dataclass(frozen=True)
class TrialTLS:
    """One trial's certificates (PEM). The server's own key never leaves the server's host."""

    ca_cert: bytes
    server_key: bytes
    server_cert: bytes
    clients: tuple[ClientTLS, ...]  # one per rank

    @classmethod
    def issue(cls, server_ip: str, n_clients: int) -> TrialTLS:
        """A fresh CA; a server cert valid for ``server_ip``; one client cert per rank."""
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name(f"vflsweep trial CA {os.urandom(6).hex()}")
        ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
        server_key = ec.generate_private_key(ec.SECP256R1())
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(server_ip))])
        server = _cert(_name("federated server"), ca_name, server_key.public_key(), ca_key,
                       san=san, usage=ExtendedKeyUsageOID.SERVER_AUTH)  # fmt: skip
        clients = []
        for rank in range(n_clients):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _cert(_name(f"rank {rank}"), ca_name, key.public_key(), ca_key,
                         usage=ExtendedKeyUsageOID.CLIENT_AUTH)  # fmt: skip
            clients.append(ClientTLS(_pem(ca), _key_pem(key), _pem(cert)))
        return cls(_pem(ca), _key_pem(server_key), _pem(server), tuple(clients))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _cert(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    san: x509.SubjectAlternativeName | None = None,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), True)
    )
    if ca:
        builder = builder.add_extension(_ca_usage(), critical=True)
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@contextmanager
def private_dir(files: Mapping[str, bytes]) -> Iterator[dict[str, str]]:
    """Write ``files`` (name -> bytes) to a fresh 0700 directory; yield name -> path.

    The directory and everything in it is removed on exit, also on error.
    """
    root = Path(tempfile.mkdtemp(prefix="vflsweep-tls-"))  # mkdtemp creates it 0700
    try:
        root.chmod(0o700)
        paths = {}
        for name, data in files.items():
            path = root / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            paths[name] = str(path)
        yield paths
    finally:
        shutil.rmtree(root, ignore_errors=True)


def client_config(paths: Mapping[str, str]) -> dict[str, str]:
    """xgboost's worker TLS keys, from the paths ``private_dir(client_files(...))`` gave."""
    return {
        "federated_server_cert_path": paths["ca.pem"],
        "federated_client_key_path": paths["client-key.pem"],
        "federated_client_cert_path": paths["client.pem"],
    }


def client_files(client: ClientTLS) -> dict[str, bytes]:
    return {"ca.pem": client.ca_cert, "client-key.pem": client.key, "client.pem": client.cert}


def server_files(tls: TrialTLS) -> dict[str, bytes]:
    """The server's key pair and the CA it verifies clients against."""
    return {"server-key.pem": tls.server_key, "server.pem": tls.server_cert,
            "ca.pem": tls.ca_cert}  # fmt: skip


def hosts_in(cert_pem: bytes) -> Sequence[str]:
    """The IP addresses a server certificate is valid for (tests, diagnostics)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
