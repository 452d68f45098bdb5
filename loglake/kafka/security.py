"""TLS and SCRAM for the embedded broker: a local CA, the broker's certificate, its users.

``kafka.security`` (``loglake.core.config.KafkaSecurity``) makes the embedded broker listen
with SASL/SCRAM over TLS (listener SASL_SSL). What it needs is generated here, once, under
``<home>/kafka/security/`` (mode 0700)::

    ca.pem            the CA certificate clients trust (the default of kafka.security.ca_file)
    ca.key            the CA's private key (0600): signs a new broker certificate before the old expires
    broker.pem        the broker's private key and certificate for localhost and 127.0.0.1 (0600)
    broker.password   the password of the broker's own SCRAM user, generated (0600)
    formatted         marks storage formatted with that user (a plaintext profile's data is refused)

Two SCRAM users: the broker's own (``loglake-broker``: its inter-broker listener, and how
loglake checks that the broker answers) is written into the metadata log when the storage
is formatted, its password passed in an argument file (0600, deleted after) rather than on
a command line ``ps`` shows; the client user (``kafka.security.username``) is set through
the broker's admin API at every start, with the password from the environment, so a
changed password takes effect at the next ``loglake kafka start``.

The controller listener speaks TLS and asks for a client certificate: only holders of a
key the local CA signed (the broker itself) reach it.

The nodes of a local cluster (``loglake.local.cluster``) share one ``BrokerSecurity`` whose home is
``<state>/cluster``: one CA, certificate and broker password, prepared once before they start.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import ipaddress
import os
import secrets
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import SecretStr

from loglake.core.config import BROKER_USER, KafkaSecurity, embedded_ca_file
from loglake.core.errors import KafkaUnavailableError

HOSTS = ("localhost", "127.0.0.1")  # what the broker's certificate names (its listeners bind localhost)
SCRAM_ITERATIONS = 8192
CA_DAYS = 3650
CERT_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)


def security_dir(home: Path) -> Path:
    """Where the embedded broker's CA, certificate and own password live."""
    return Path(home) / "kafka" / "security"


def ca_file(home: Path) -> Path:
    """The CA certificate of the embedded broker under state directory ``home``."""
    return embedded_ca_file(home)


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``path`` atomically, created with ``mode`` (never briefly readable by others)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


# --- certificates ------------------------------------------------------------------------


def _name(common_name: str):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "loglake"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _new_key():
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:
    # Unencrypted PKCS#8: what Kafka's PEM key store reads without ssl.key.password (the
    # file's mode, 0600 in a 0700 directory, is what protects it).
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _new_ca():
    key = _new_key()
    now = dt.datetime.now(dt.timezone.utc)
    name = _name("loglake local CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _new_broker_cert(ca_key, ca_cert):
    key = _new_key()
    now = dt.datetime.now(dt.timezone.utc)
    names = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h) for h in HOSTS]
    cert = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CERT_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            # Server (its listeners) and client (the broker reaching its own controller listener).
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _needs_new_broker_cert(path: Path, ca_cert) -> bool:
    try:
        cert = x509.load_pem_x509_certificates(path.read_bytes())[0]
    except (FileNotFoundError, ValueError, IndexError):
        return True
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return True
    named = {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
        str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    return (cert.issuer != ca_cert.subject or not named >= set(HOSTS)
            or cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc) < RENEW_BEFORE)


def _ensure_ca(directory: Path):
    """The local CA under ``directory`` (made once): its certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_pem, ca_key_path = directory / "ca.pem", directory / "ca.key"
    if not (ca_pem.exists() and ca_key_path.exists()):
        ca_key, ca_cert = _new_ca()
        write_private(ca_key_path, _key_pem(ca_key))
        write_private(ca_pem, _cert_pem(ca_cert), 0o644)
        for old in ("broker.pem", "registry.crt", "registry.key"):  # signed by a CA that is gone
            (directory / old).unlink(missing_ok=True)
    return x509.load_pem_x509_certificate(ca_pem.read_bytes())


def _signed(directory: Path, ca_cert):
    """A new key and certificate for localhost and 127.0.0.1, signed by the CA under ``directory``."""
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    return _new_broker_cert(ca_key, ca_cert)


def ensure_tls(directory: Path) -> None:
    """The CA (once) and the broker's certificate (again when missing, foreign or near expiry)."""
    ca_cert = _ensure_ca(directory)
    broker = directory / "broker.pem"
    if _needs_new_broker_cert(broker, ca_cert):
        key, cert = _signed(directory, ca_cert)
        # Kafka's PEM key store: the private key, then the chain from the broker up to the CA.
        write_private(broker, _key_pem(key) + _cert_pem(cert) + _cert_pem(ca_cert))


def ensure_server_cert(directory: Path, stem: str) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 signed by the same local CA, as the PEM files
    an HTTP server reads (the embedded schema registry): ``<stem>.crt`` (the certificate,
    then the CA's) and ``<stem>.key`` (0600). Made again when missing, foreign or near expiry."""
    ca_cert = _ensure_ca(directory)
    crt, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    if not key_path.exists() or _needs_new_broker_cert(crt, ca_cert):
        key, cert = _signed(directory, ca_cert)
        write_private(key_path, _key_pem(key))
        write_private(crt, _cert_pem(cert) + _cert_pem(ca_cert), 0o644)
    return crt, key_path


def _own_password(directory: Path) -> str:
    path = directory / "broker.password"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(32).encode())
    return path.read_text().strip()


# --- the broker's side -------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerSecurity:
    """SASL/SCRAM over TLS for one embedded broker whose state is under ``home``.

    ``client`` is the profile's ``kafka.security``: the user loglake's clients log in as.
    """

    home: Path
    client: KafkaSecurity

    @property
    def directory(self) -> Path:
        return security_dir(self.home)

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def formatted(self) -> Path:
        """Marks that the broker's storage was formatted with its own SCRAM user."""
        return self.directory / "formatted"

    @property
    def mechanism(self) -> str:
        return self.client.mechanism

    def prepare(self) -> None:
        """Generate what is missing: CA, broker certificate, the broker user's password. Safe
        when the nodes of a local cluster prepare side by side (one at a time, under a lock)."""

        self.directory.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(self.directory / ".prepare.lock", os.O_RDWR | os.O_CREAT, 0o600)) as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            ensure_tls(self.directory)
            _own_password(self.directory)

    def own(self) -> KafkaSecurity:
        """The broker's own SCRAM user, as a client setting (same mechanism and CA)."""
        return KafkaSecurity(mechanism=self.mechanism, username=BROKER_USER,
                             password=SecretStr(_own_password(self.directory)), ca_file=str(self.ca_file))

    def server_properties(self, port: int, controller_port: int, voters: str) -> dict[str, str]:
        """The broker's listener and security settings (the rest is ``EmbeddedKafka``'s)."""
        broker_pem = str(self.directory / "broker.pem")
        listener = self.mechanism.lower()
        return {
            "listeners": f"SASL_SSL://localhost:{port},CONTROLLER://localhost:{controller_port}",
            "advertised.listeners": f"SASL_SSL://localhost:{port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "inter.broker.listener.name": "SASL_SSL",
            # SCRAM cannot guard the controller listener (its credentials live in the metadata
            # the controller serves): TLS with a client certificate the local CA signed does.
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
            "listener.name.controller.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": self.mechanism,
            "sasl.mechanism.inter.broker.protocol": self.mechanism,
            f"listener.name.sasl_ssl.{listener}.sasl.jaas.config": self.own().java()["sasl.jaas.config"],
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": broker_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
        }

    @contextmanager
    def format_arguments(self) -> Iterator[str]:
        """``@<file>`` for Kafka's storage tool: the broker user's SCRAM credential, in a file
        (0600, deleted after) rather than on the command line."""
        # A file of its own per call: the nodes of a local cluster format side by side.
        fd, name = tempfile.mkstemp(prefix=".format-args.", dir=self.directory)  # mode 0600
        os.close(fd)
        path = Path(name)
        own = self.own()
        write_private(path, "--add-scram\n{}=[name={},iterations={},password={}]\n".format(
            self.mechanism, BROKER_USER, SCRAM_ITERATIONS, own.password.get_secret_value()).encode())
        try:
            yield f"@{path}"
        finally:
            path.unlink(missing_ok=True)

    def admin_conf(self, bootstrap: str, **extra) -> dict:
        """librdkafka settings to reach the broker as its own user."""
        return {"bootstrap.servers": bootstrap, **self.own().librdkafka(), **extra}

    def set_client_user(self, bootstrap: str, timeout: float = 15.0) -> None:
        """Give the client user its SCRAM credential, with the password the profile has now."""

        mechanism = getattr(ScramMechanism, self.mechanism.replace("-", "_"))
        admin = AdminClient(self.admin_conf(bootstrap, log_level=0))
        upsert = UserScramCredentialUpsertion(self.client.username, ScramCredentialInfo(mechanism, SCRAM_ITERATIONS),
                                              self.client.password.get_secret_value().encode())
        try:
            admin.alter_user_scram_credentials([upsert], request_timeout=timeout)[self.client.username].result(
                timeout=timeout)
        except KafkaException as e:
            raise KafkaUnavailableError(f"the broker at {bootstrap} did not take the SCRAM credential of user "
                                        f"{self.client.username!r}: {e.args[0].str()}") from None
