"""The schema registry of topics in a Schema Registry format (Avro, Protobuf, JSON Schema).

Records of such a topic are in the registry's wire format: a magic byte 0, the 4-byte
big-endian id of the schema they were written with, the payload. The registry (any that
speaks Confluent's REST API: Confluent's, Apicurio's ``ccompat`` API, Karapace, Redpanda's)
holds the schemas by id and by subject version. loglake reads it through confluent-kafka's
``SchemaRegistryClient`` with the profile's ``registry:`` settings.

A registry that does not answer (refused, timed out, a 5xx) is a transient error: every
call is retried for ``registry.retry_seconds``, then fails as ``RegistryUnavailableError``
(still transient: the stream's supervisor or the task's retries try again). A subject or an
id the registry does not know is an answer, not an outage. A registry that refuses the
profile's login (401, 403) or whose certificate the profile's CA does not sign is a
``ConfigError`` at once, naming the key to fix: waiting would not mend it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, TypeVar

from loglake.core.config import Config, RegistryField, RegistrySettings
from loglake.core.errors import ConfigError, RegistryUnavailableError
from loglake.core.retrying import retry_transient

T = TypeVar("T")
log = logging.getLogger("loglake.schemaregistry")

# The registry's names of the formats (``schemaType``) by loglake's.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


@dataclass(frozen=True)
class Version:
    """One version of a subject: its number, the schema's id and text."""

    version: int
    id: int
    schema_type: str  # AVRO, PROTOBUF, JSON
    schema_str: str


@functools.lru_cache(maxsize=8)
def _client(settings: RegistrySettings):
    from confluent_kafka.schema_registry import SchemaRegistryClient  # deferred: httpx, authlib

    # No retries inside the client: loglake's own (below) know how long an outage may last.
    return SchemaRegistryClient({**settings.client_conf(), "max.retries": 0})


def client(config: Config):
    """confluent-kafka's ``SchemaRegistryClient`` for the profile's registry (one per settings)."""
    return _client(config.registry)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's own "no answer" errors (confluent-kafka's registry client uses httpx,
    renamed httpx2 in its 2.16 extras)."""
    out: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module in ("httpx2", "httpx"):
        try:
            out.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(out)


def _outage(error: BaseException) -> bool:
    """The registry did not answer (network, timeout) or failed on its side (5xx)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(error, _transport_errors()):
        return True
    return isinstance(error, SchemaRegistryError) and (error.http_status_code or 0) >= 500


def _untrusted(error: BaseException) -> bool:
    """The registry's TLS certificate failed verification (the error or one it wraps)."""
    import ssl

    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _misconfigured(config: Config, error: BaseException) -> ConfigError | None:
    """The registry's answer says the profile's settings are wrong: its login, its CA."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url, settings = config.registry.url, config.registry
    if isinstance(error, SchemaRegistryError) and error.http_status_code in (401, 403):
        given = (f"as user {settings.username!r}" if settings.username else "without a login (registry.username "
                 "and registry.password are not set)")
        return ConfigError(f"the schema registry at {url} refused loglake {given} (HTTP {error.http_status_code})",
                           key="registry.password" if settings.username else "registry.username")
    if _untrusted(error):
        trusted = (f"the CA in {settings.ca_file}" if settings.ca_file else "the system's CAs (registry.ca_file "
                   "is not set)")
        return ConfigError(f"the schema registry at {url} presented a certificate {trusted} does not sign",
                           key="registry.ca_file")
    return None


def call(config: Config, what: str, fn: Callable[[], T], seconds: float | None = None) -> T:
    """``fn()`` (a registry call), retried while the registry does not answer."""
    url = config.registry.url

    def attempt() -> T:
        try:
            return fn()
        except Exception as e:
            wrong = _misconfigured(config, e)
            if wrong is not None:
                raise wrong from None
            if _outage(e):
                raise RegistryUnavailableError(url, what, str(e).splitlines()[0] if str(e) else type(e).__name__) from e
            raise

    return retry_transient(attempt, what=f"schema registry {what}", only=RegistryUnavailableError,
                           seconds=config.registry.retry_seconds if seconds is None else seconds, max_delay=5.0)


def _not_found(error: BaseException) -> bool:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return isinstance(error, SchemaRegistryError) and error.http_status_code == 404


def versions(config: Config, subject: str, seconds: float | None = None) -> list[Version]:
    """Every version of ``subject``, oldest first; a subject the registry does not know is an
    error that says how to register one. ``seconds``: how long to wait out an outage (default
    ``registry.retry_seconds``)."""
    c = client(config)
    try:
        numbers = call(config, f"versions of {subject}", lambda: c.get_versions(subject), seconds)
    except Exception as e:
        if _not_found(e):
            raise ConfigError(f"subject {subject!r} is not in the schema registry at {config.registry.url}: register "
                              "the topic's schema first (a producer's serializer does on its first record, or "
                              "loglake produce --format)", key="subject") from None
        raise
    return [version(config, subject, n, seconds) for n in sorted(numbers)]


def version(config: Config, subject: str, number: int, seconds: float | None = None) -> Version:
    c = client(config)
    reg = call(config, f"{subject} version {number}", lambda: c.get_version(subject, number), seconds)
    return Version(reg.version, reg.schema_id, reg.schema.schema_type or "AVRO", reg.schema.schema_str)


def register(config: Config, subject: str, schema_str: str, schema_type: str = "AVRO") -> int:
    """Register ``schema_str`` under ``subject`` (the registry's compatibility rules apply);
    its id."""
    from confluent_kafka.schema_registry import Schema

    c = client(config)
    schema = Schema(schema_str, schema_type)
    return call(config, f"register under {subject}", lambda: c.register_schema(subject, schema))


def status_line(config: Config) -> str:
    """``registry: URL`` (what ``loglake status`` and ``loglake registry status`` print)."""
    return f"registry: {config.registry.url}"


def refusal(reader: dict[str, RegistryField], writer: dict[str, RegistryField],
            promotes: Callable[[str, str], bool] = lambda w, r: False) -> str | None:
    """Why records whose writer's schema has fields ``writer`` cannot be read as a table with
    fields ``reader`` (None: they can): a field the table requires that the writer lacks, or a
    field of another type that ``promotes`` does not read as the table's (by name)."""
    problems = []
    for name, r in reader.items():
        w = writer.get(name)
        if w is None:
            if r.required:
                problems.append(f"it lacks field {name!r} ({r.type}), which the table requires")
        elif w.type != r.type and not promotes(w.type, r.type):
            problems.append(f"its field {name!r} is {w.type} where the table holds {r.type}")
    return "; ".join(problems) or None
