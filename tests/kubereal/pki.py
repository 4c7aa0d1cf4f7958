"""The control plane's own credentials: a CA, one certificate for every loopback server and
client (etcd, its peer port, the API server), the kubelet's serving certificate, the
service-account signing key and static tokens.

Everything is written owner-only (directory 0700, files 0600): the tokens are cluster-admin.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# the users the tokens authenticate as; system:masters is what kubeadm's admin.conf carries
USERS = ("admin", "system:kube-controller-manager", "system:kube-scheduler", "system:node:kubelet")
# where the kubelet's nodes are (127.0.89.N for node N), as its serving certificate names them
KUBELET_ADDRESSES = [f"127.0.89.{i}" for i in range(1, 17)]


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    cert: Path
    key: Path
    kubelet_cert: Path
    kubelet_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    tokens: dict[str, str]  # user -> bearer token


def write(d: Path, days: int = 2) -> Pki:
    """A fresh CA and everything signed by it, in `d` (created 0700)."""
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gameday-kube-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    # etcd checks a peer's and a client's certificate against the CA: one certificate with both
    # usages serves every loopback TLS endpoint and authenticates the API server to etcd (and to
    # the kubelet)
    key, cert = _issue(
        ca_key,
        ca_name,
        "kube-apiserver",
        [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
        now,
        days,
    )
    # the kubelet's serving certificate: the API server checks it against the CA
    # (--kubelet-certificate-authority) at the nodes' addresses
    kubelet_key, kubelet_cert = _issue(
        ca_key,
        ca_name,
        "system:node:gameday-kubelet",
        [x509.IPAddress(ipaddress.ip_address(a)) for a in KUBELET_ADDRESSES],
        now,
        days,
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    raw = serialization.PrivateFormat.TraditionalOpenSSL
    none = serialization.NoEncryption()
    tokens = {u: secrets.token_hex(24) for u in USERS}
    out = Pki(
        dir=d,
        ca=d / "ca.crt",
        cert=d / "server.crt",
        key=d / "server.key",
        kubelet_cert=d / "kubelet.crt",
        kubelet_key=d / "kubelet.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
        token_file=d / "tokens.csv",
        tokens=tokens,
    )
    _private(out.ca, ca.public_bytes(pem))
    _private(out.cert, cert.public_bytes(pem))
    _private(out.key, key.private_bytes(pem, raw, none))
    _private(out.kubelet_cert, kubelet_cert.public_bytes(pem))
    _private(out.kubelet_key, kubelet_key.private_bytes(pem, raw, none))
    _private(out.sa_key, sa_key.private_bytes(pem, raw, none))
    _private(
        out.sa_pub,
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    # token,user,uid,"group": the API server's --token-auth-file format
    _private(
        out.token_file,
        "".join(f'{t},{u},{u},"system:masters"\n' for u, t in tokens.items()).encode(),
    )
    return out


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    cn: str,
    sans: list[x509.GeneralName],
    now: datetime.datetime,
    days: int,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and a certificate for `cn` at `sans`, for serving and as a client, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert
