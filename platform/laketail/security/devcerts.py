"""Certificates for a demo or test cluster: ``python -m laketail.security.devcerts DIR NAME...``.

Makes, once (nothing is overwritten when ``DIR/ca.pem`` exists), a private CA and one
server certificate whose subject alternative names are every NAME given plus
``localhost`` and ``127.0.0.1``, signed by that CA::

    DIR/ca.pem          the CA certificate: ssl.truststore.location, clients' ssl.ca.location
    DIR/ca-key.pem      the CA's key (keep it, or delete it once the certificates exist)
    DIR/server.pem      ssl.keystore.certificate.chain (certificate, then the CA's)
    DIR/server-key.pem  ssl.keystore.key

The docker-compose cluster runs it at start-up. For anything real, use your own CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 825


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make(directory: Path, names: list[str]) -> bool:
    """Write the files; False when they were there already."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.pem").exists():
        return False
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "laketail demo CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys([*names, "localhost"])]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "ca-key.pem").write_bytes(_key_pem(ca_key))
    (directory / "server-key.pem").write_bytes(_key_pem(key))
    (directory / "server.pem").write_bytes(cert.public_bytes(pem) + ca.public_bytes(pem))
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))  # last: its presence means "done"
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    made = make(Path(argv[0]), argv[1:])
    print(f"{argv[0]}: {'certificates made' if made else 'certificates already there'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
