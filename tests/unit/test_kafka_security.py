"""Authenticated Kafka without a broker: ``kafka.security`` at load, the client settings both
kinds of client derive from it, and the embedded broker's CA and certificate.

The broker itself, its refusals and the pipeline through it: tests/system/test_secure_kafka.py.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from loglake.core import paths
from loglake.core.config import load_config
from loglake.core.errors import ConfigError

PASSWORD = 'pa"ss\\word with spaces'


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    shutil.copytree(paths.REPO_ROOT / "conf", tmp_path / "conf")
    monkeypatch.setenv("LOGLAKE_KAFKA_USERNAME", "alice")
    monkeypatch.setenv("LOGLAKE_KAFKA_PASSWORD", PASSWORD)
    return tmp_path / "conf"


def edit_secure(conf: Path, fn) -> None:
    path = conf / "loglake.yaml"
    data = yaml.safe_load(path.read_text())
    fn(data["profiles"]["local-secure"]["kafka"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_local_secure_derives_both_clients_settings_from_one_place(conf, tmp_path):
    c = load_config(conf, profile="local-secure", home=tmp_path / "state")
    ca = str(tmp_path / "state" / "kafka" / "security" / "ca.pem")
    client = c.kafka_client_conf()
    assert {k: client[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                                   "ssl.ca.location")} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": PASSWORD, "ssl.ca.location": ca}
    java = c.kafka_java_conf()
    assert {k: v for k, v in java.items() if k != "sasl.jaas.config"} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": ca}
    # Quotes and backslashes escaped as Kafka's JAAS parser reads them back.
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="alice" password="pa\\"ss\\\\word with spaces";')
    assert PASSWORD not in repr(c.kafka.security)  # a SecretStr: never in a repr or a log line
    assert "LOGLAKE_KAFKA_PASSWORD" in c.kafka_credentials_hint()


def test_the_local_profile_stays_plaintext(conf):
    c = load_config(conf, profile="local")
    assert c.kafka.security is None and c.kafka_ca_file is None and c.kafka_java_conf() == {}
    assert set(c.kafka_client_conf()) == {"bootstrap.servers", "logger"}


def test_missing_password_variable_names_the_key_and_the_variable(conf, monkeypatch):
    monkeypatch.delenv("LOGLAKE_KAFKA_PASSWORD")
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile="local-secure")
    assert e.value.key == "profiles.local-secure.kafka.security.password"
    assert "LOGLAKE_KAFKA_PASSWORD is not set" in str(e.value)


def test_empty_password_variable_is_refused_naming_it(conf, monkeypatch):
    monkeypatch.setenv("LOGLAKE_KAFKA_PASSWORD", "")
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile="local-secure")
    assert e.value.key == "profiles.local-secure.kafka.security.password"
    assert "LOGLAKE_KAFKA_PASSWORD is empty" in str(e.value)


def test_a_password_can_come_from_a_secret_file_and_a_missing_file_names_the_key(conf, tmp_path, monkeypatch):
    monkeypatch.delenv("LOGLAKE_KAFKA_PASSWORD")
    secret = tmp_path / "kafka_password"
    secret.write_text("from-the-file\n")  # as `docker secret` and `echo` leave it
    edit_secure(conf, lambda k: k["security"].update(password=f"${{file:{secret}}}"))
    c = load_config(conf, profile="local-secure")
    assert c.kafka.security.password.get_secret_value() == "from-the-file"
    secret.unlink()
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile="local-secure")
    assert e.value.key == "profiles.local-secure.kafka.security.password"
    assert f"cannot read {secret}" in str(e.value)


BAD_SECURITY = [
    (lambda k: k["security"].update(password="hunter2"), "security.password", "a secret is written into conf/"),
    (lambda k: k.setdefault("client", {}).update({"sasl.username": "bob"}), "client.sasl.username",
     "set by kafka.security"),
    (lambda k: k.setdefault("spark", {}).update({"ssl.truststore.location": "/x.pem"}), "spark.ssl.truststore.location",
     "set by kafka.security"),
    (lambda k: k["security"].update(ca_file="/my/ca.pem"), "security.ca_file", "leave ca_file null"),
    (lambda k: k.update(embedded=False), "security.ca_file", "an external cluster needs the file of the CA"),
    (lambda k: k["security"].update(username="loglake-broker"), "security.username", "the embedded broker's own user"),
    (lambda k: k["security"].update(username="a,b"), "security.username", "not a SCRAM user name"),
    (lambda k: k["security"].update(mechanism="PLAIN"), "security.mechanism", "'SCRAM-SHA-512' or 'SCRAM-SHA-256'"),
    (lambda k: k["security"].update(protocol="SASL_PLAINTEXT"), "security.protocol", "'SASL_SSL'"),
]


@pytest.mark.parametrize("mutate,key,fragment", BAD_SECURITY)
def test_bad_security_is_refused_at_load_naming_the_key(conf, mutate, key, fragment):
    edit_secure(conf, mutate)
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile="local-secure")
    assert e.value.key == f"profiles.local-secure.kafka.{key}", str(e.value)
    assert fragment in str(e.value)


def test_a_local_cluster_can_be_secured(conf):
    """kafka.security on local-cluster: its nodes share one CA under <state>/cluster."""
    path = conf / "loglake.yaml"
    data = yaml.safe_load(path.read_text())
    data["profiles"]["local-cluster"]["kafka"]["security"] = data["profiles"]["local-secure"]["kafka"]["security"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    c = load_config(conf, profile="local-cluster", home=conf / "state")
    assert c.kafka_ca_file == str(conf / "state" / "cluster" / "kafka" / "security" / "ca.pem")
    assert c.kafka_client_conf()["security.protocol"] == "SASL_SSL"


def test_no_profile_in_conf_writes_a_secret():
    """Every secret a shipped profile names comes from the environment or from a file."""
    text = (paths.REPO_ROOT / "conf" / "loglake.yaml").read_text()
    for m in re.finditer(r"(?m)^\s*(password|sasl\.password|sasl\.jaas\.config):\s*(.*)$", text):
        assert re.fullmatch(r"\$\{[A-Z_]+\}|\$\{file:(\$\{[A-Z_]+\}|/[^}]+)\}", m[2].split("#")[0].strip()), m[0]


# --- the embedded broker's certificates ------------------------------------------------------


def test_ca_and_broker_certificate_for_localhost(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from loglake.kafka.security import ensure_tls

    d = tmp_path / "security"
    ensure_tls(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in d.iterdir()} == {
        "ca.pem": 0o644, "ca.key": 0o600, "broker.pem": 0o600}
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    chain = x509.load_pem_x509_certificates((d / "broker.pem").read_bytes())
    assert b"-----BEGIN PRIVATE KEY-----" in (d / "broker.pem").read_bytes()  # unencrypted PKCS#8, Kafka's PEM store
    broker = chain[0]
    assert chain[1] == ca
    ca.public_key().verify(broker.signature, broker.tbs_certificate_bytes, ec.ECDSA(broker.signature_hash_algorithm))
    sans = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_certificates_are_kept_and_renewed_only_near_expiry(tmp_path, monkeypatch):
    from loglake.kafka import security
    from loglake.kafka.security import ensure_tls

    d = tmp_path / "security"
    ensure_tls(d)
    first = {f.name: f.read_bytes() for f in d.iterdir()}
    ensure_tls(d)
    assert {f.name: f.read_bytes() for f in d.iterdir()} == first
    monkeypatch.setattr(security, "RENEW_BEFORE", dt.timedelta(days=security.CERT_DAYS + 1))
    ensure_tls(d)
    again = {f.name: f.read_bytes() for f in d.iterdir()}
    assert again["ca.pem"] == first["ca.pem"] and again["broker.pem"] != first["broker.pem"]
