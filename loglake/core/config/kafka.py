"""A profile's ``kafka`` section: the brokers, the clients' settings and the cluster's security."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from loglake.core.errors import KeyedValueError
from loglake.core.config.base import _SCRAM_USER, _Strict


BROKER_USER = "loglake-broker"  # the embedded broker's own SCRAM user (loglake.kafka.security)
# What ``kafka.security`` sets in each client's settings: ``client`` and ``spark`` may not set them too.
_SECURITY_KEYS = {"client": ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                             "sasl.password", "ssl.ca.location"),
                  "spark": ("security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.type",
                            "ssl.truststore.location", "ssl.truststore.certificates")}


def jaas_quote(value: str) -> str:
    """``value`` as a quoted JAAS option value (Kafka's parser reads backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def embedded_ca_file(home: Path) -> Path:
    """The CA certificate loglake generates for the embedded broker of state directory ``home``."""
    return Path(home) / "kafka" / "security" / "ca.pem"


class KafkaSecurity(_Strict):
    """SASL/SCRAM over TLS (listener SASL_SSL): who loglake's Kafka clients log in as, and
    the CA that signed the brokers' certificates.

    Both kinds of client take their settings from here — ``librdkafka`` for confluent-kafka,
    ``java`` for Spark's Kafka source — so the two cannot disagree. ``password`` is a
    ``SecretStr``: it shows as ``**********`` in any repr or log line.
    """

    protocol: Literal["SASL_SSL"] = "SASL_SSL"
    mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = "SCRAM-SHA-512"
    username: str
    password: SecretStr
    # null: the CA loglake generates for its embedded broker (<state>/kafka/security/ca.pem).
    ca_file: str | None = None

    @field_validator("username")
    @classmethod
    def _user(cls, v: str) -> str:
        if not _SCRAM_USER.match(v):
            raise ValueError(f"{v!r} is not a SCRAM user name (letters, digits, '.', '_', '@' and '-')")
        return v

    @field_validator("password")
    @classmethod
    def _not_empty(cls, v: SecretStr) -> SecretStr:
        if not v.get_secret_value():
            raise ValueError("the password is empty (no silent empty secrets: set the environment variable "
                             "this key references to the password)")
        return v

    def librdkafka(self, ca_file: str | None = None) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings; ``ca_file`` replaces a null ``ca_file``.

        librdkafka checks the broker's host name against its certificate by default
        (``ssl.endpoint.identification.algorithm=https``), as the Java client does."""
        return {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism,
                "sasl.username": self.username, "sasl.password": self.password.get_secret_value(),
                "ssl.ca.location": str(self.ca_file or ca_file)}

    def java(self, ca_file: str | None = None) -> dict[str, str]:
        """Java client settings (Spark's Kafka source takes them as ``kafka.<key>``)."""
        jaas = (f"org.apache.kafka.common.security.scram.ScramLoginModule required "
                f"username={jaas_quote(self.username)} password={jaas_quote(self.password.get_secret_value())};")
        return {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism, "sasl.jaas.config": jaas,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file or ca_file)}


class KafkaSettings(_Strict):
    bootstrap_servers: str = "localhost:9092"
    embedded: bool = True
    # How loglake's clients authenticate (SASL/SCRAM over TLS); null: plaintext, no login.
    security: KafkaSecurity | None = None
    # Extra librdkafka settings for confluent-kafka clients.
    client: dict[str, str] = Field(default_factory=dict)
    # Extra Java client settings for Spark's Kafka source (passed as kafka.<key>).
    spark: dict[str, str] = Field(default_factory=dict)
    # How loglake creates topics: replicas per partition, and how many must hold a record
    # before the (acks=all) producer sees it acknowledged.
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _security_in_one_place(self) -> "KafkaSettings":
        if self.security is None:
            return self
        for section, keys in _SECURITY_KEYS.items():
            for key in keys:
                if key in getattr(self, section):
                    raise KeyedValueError(f"{section}.{key}", f"{key} is set by kafka.security (for both kinds of "
                                                              f"client): remove it from kafka.{section}")
        if not self.embedded and self.security.ca_file is None:
            raise KeyedValueError("security.ca_file", "an external cluster needs the file of the CA that signed its "
                                                      "brokers' certificates (loglake generates a CA only for its "
                                                      "embedded broker)")
        if self.embedded and self.security.ca_file is not None:
            raise KeyedValueError("security.ca_file", "the embedded broker's certificate is signed by the CA loglake "
                                                      "generates under the state directory: leave ca_file null")
        if self.embedded and self.security.username == BROKER_USER:
            raise KeyedValueError("security.username", f"{BROKER_USER!r} is the embedded broker's own user: "
                                                       "choose another name")
        return self

    @model_validator(mode="after")
    def _isr_fits(self) -> "KafkaSettings":
        if self.min_insync_replicas is not None and self.min_insync_replicas > self.replication_factor:
            raise KeyedValueError("min_insync_replicas", f"min_insync_replicas ({self.min_insync_replicas}) "
                                  f"exceeds replication_factor ({self.replication_factor}): no write could succeed")
        return self

    @field_validator("bootstrap_servers")
    @classmethod
    def _hostports(cls, v: str) -> str:
        for hp in v.split(","):
            host, sep, port = hp.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"{hp!r} is not host:port (expected a comma-separated list of host:port)")
        return v

    @property
    def port(self) -> int:
        """Port of the first bootstrap server (the embedded broker listens there)."""
        return self.ports[0]

    @property
    def ports(self) -> list[int]:
        """The port of every bootstrap server (one per node of a local cluster)."""
        return [int(hp.rpartition(":")[2]) for hp in self.bootstrap_servers.split(",")]
