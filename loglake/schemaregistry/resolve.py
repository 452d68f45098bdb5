"""A registry-format dataset's fields, from its subject: which version the tables hold.

A writer (the speed stream, at its start and before each micro-batch; the batch job; replay)
resolves the dataset before it reads: ``resolve`` returns the dataset with the fields of the
version its tables take (``Dataset.registry``), and every version of the subject records may
carry, each with why the tables cannot hold it, if they cannot.

Two rules decide, and the tables take the subject's newest version that passes both:

- loglake's own rules of schema change (``loglake.schema_versions``): the change from the version
  they recorded last is additive (new optional fields: old rows read null); a version that would
  change or drop a column they hold is refused;
- the format's rules of reading: the version, as the reader's schema, reads the records of every
  version the tables held before it (for Avro, Avro's own ``SchemaCompatibility``:
  ``loglake.schemaregistry.avro.compatibility``). A field added as ``["null", ...]`` without a
  default is refused so: Avro reads no record written before it with such a reader.

A refused version is named with why (field, versions, the format's reason) and never applied;
the tables stay at the newest version they can take. Records are decoded with their own
writer's schema and read as the tables' (Avro's resolution); those written with a refused
version, or with one the tables' schema cannot read, are quarantined as ``incompatible_schema``.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from pydantic import ValidationError

from loglake.core.config import Config, Dataset, RegistrySchemas, WriterSchema
from loglake.core.errors import ConfigError, LoglakeError
from loglake.core.retrying import retry_transient
from loglake import schema_versions
from loglake.schema_versions import (breaking_changes, compare, describe_changes, recorded_versions, spec_of,
                                    table_columns)
import loglake.schemaregistry as registry
from loglake.schemaregistry import SCHEMA_TYPES, Version, avro, jsonschema, protobuf, version, versions

# What reads each registry format's schemas: its fields as columns, which writers a table holds.
KINDS = {"avro": avro, "json-schema": jsonschema, "protobuf": protobuf}


def with_fields(ds: Dataset, version: Version, schemas: RegistrySchemas | None = None) -> Dataset:
    """``ds`` with the fields of the subject's ``version`` (validated again: the key and the
    quality and Z-order columns must be fields of it)."""
    if ds.format not in KINDS:
        raise ConfigError(f"dataset {ds.name}: format {ds.format} is not read yet ({', '.join(KINDS)} are)",
                          key=f"datasets.{ds.name}.format")
    try:
        fields = KINDS[ds.format].fields(avro.envelope_row(version.schema_str) if ds.debezium else version.schema_str)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"dataset {ds.name}: subject {ds.subject_name} version {version.version} (id {version.id}) "
                          f"is not a schema loglake can read: {e}", key=f"datasets.{ds.name}.subject") from None
    if schemas is None:
        schemas = RegistrySchemas(subject=ds.subject_name, version=version.version, id=version.id,
                                  reader=version.schema_str, writers=())
    data = {name: getattr(ds, name) for name in type(ds).model_fields if name not in ("schema_", "registry")}
    try:
        return Dataset.model_validate({**data, "schema": fields, "registry": schemas})
    except ValidationError as e:
        err = e.errors()[0]
        cause = (err.get("ctx") or {}).get("error")
        key = getattr(cause, "key", "") or ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"dataset {ds.name}: with subject {ds.subject_name} version {version.version}: "
                          f"{err['msg'].removeprefix('Value error, ')}", key=f"datasets.{ds.name}.{key}") from None


def resolve(config: Config, ds: Dataset, known: list[Version] | None = None) -> Dataset:
    """``ds`` with the fields its tables take now, read from the registry (``known``: the
    subject's versions, already read). A json dataset, or one resolved already, as it is."""
    if ds.resolved and known is None:  # a json dataset's fields are its conf's; resolved already
        return ds
    found = known if known is not None else versions(config, ds.subject_name)
    if not found:
        raise ConfigError(f"subject {ds.subject_name!r} has no version in the schema registry at "
                          f"{config.registry.url}", key=f"datasets.{ds.name}.subject")
    wrong = [v for v in found if v.schema_type != schema_type(ds)]
    if wrong:
        raise ConfigError(f"dataset {ds.name} is {ds.format} but subject {ds.subject_name} version {wrong[0].version} "
                          f"is {wrong[0].schema_type}", key=f"datasets.{ds.name}.format")
    newest = found[-1]
    recorded, columns = recorded_versions(config, ds), table_columns(config, ds)  # read once for every candidate
    with readability(ds) as cannot_read:
        came = as_they_came(ds, found, cannot_read)
        reader, refusals = None, {}
        for candidate in reversed(found):
            why = came[candidate.version]
            if why is None:
                breaking = breaking_changes(config, with_fields(ds, candidate), recorded, columns)
                why = describe_changes(breaking) if breaking else None
            if why is None:
                reader = candidate
                break
            refusals[candidate.version] = why
        if reader is None:
            # Not one version fits what the tables hold (a subject deleted and made anew): the
            # newest is refused like a conf change would be.
            raise ConfigError(f"dataset {ds.name}: no version of subject {ds.subject_name} fits its tables "
                              f"({refusals[newest.version]})", key=f"datasets.{ds.name}.subject")
        writers = tuple(WriterSchema(id=v.id, version=v.version, schema_str=v.schema_str,
                                     refused=_writer_refusal(ds, v, reader, refusals.get(v.version), cannot_read))
                        for v in found)
    refused = newest.version if newest.version in refusals else None
    why = None
    if refused is not None:
        why = (f"subject {ds.subject_name} version {refused} is refused as the tables' schema: {refusals[refused]}; "
               f"they stay at version {reader.version}")
    key_writers, key_field = key_schemas(config, ds) if ds.key_format != "string" else ((), None)
    schemas = RegistrySchemas(subject=ds.subject_name, version=reader.version, id=reader.id, reader=reader.schema_str,
                              writers=writers, refused_version=refused, refused=why, key_writers=key_writers,
                              key_field=key_field)
    return with_fields(ds, reader, schemas)


Readability = Callable[[Version, Version], "str | None"]


@contextmanager
def readability(ds: Dataset) -> Iterator[Readability]:
    """``cannot_read(reader, writer)``: why records written with version ``writer`` cannot be
    read with version ``reader`` as the reader's schema (None: they can). Avro: Avro's own
    ``SchemaCompatibility`` (``avro.compatibility``); JSON Schema and Protobuf: the writer's
    fields against the reader's, by name (``loglake.schemaregistry.refusal``). A writer's text
    that is not a schema of the format cannot be read."""
    if ds.format == "avro":
        with avro.compatibility() as check:
            yield lambda reader, writer: _or_unreadable(check, reader.schema_str, writer.schema_str)
        return
    kind = KINDS[ds.format]
    yield lambda reader, writer: _or_unreadable(lambda r, w: kind.refusal(kind.fields(r), w), reader.schema_str,
                                                writer.schema_str)


def _or_unreadable(check: Callable[[str, str], str | None], reader: str, writer: str) -> str | None:
    try:
        return check(reader, writer)
    except (ValueError, KeyError, TypeError) as e:
        return f"it is not a schema loglake can read: {e}"


def as_they_came(ds: Dataset, found: list[Version], cannot_read: Readability) -> dict[int, str | None]:
    """For each version of the subject (oldest first), why the tables could not take it as
    their schema when it came after the versions before it (None: they could): loglake's rules
    of schema change against the version they held then, and ``cannot_read`` against every
    version whose records they held (those that version reads). A version refused leaves the
    tables where they were, so a later version that mends it is judged by the versions whose
    records really landed, not by the refused one's.

    Only the subject's versions decide here, not the ledger: every process that resolves the
    subject (the stream, a batch job, ``loglake status``) comes to the same answer."""
    out: dict[int, str | None] = {}
    held_spec: dict | None = None
    held: list[Version] = []  # the versions whose records the tables read then
    for i, v in enumerate(found):
        try:
            spec = spec_of(with_fields(ds, v))
        except ConfigError as e:
            out[v.version] = str(e)
            continue
        if held_spec is not None:
            breaking = [c for c in compare(held_spec, spec) if c.breaking]
            unread = next(((w, why) for w in held if (why := cannot_read(v, w)) is not None), None)
            said = [describe_changes(breaking)] if breaking else []
            if unread is not None:
                said.append(f"it cannot read the records of version {unread[0].version} (id {unread[0].id}): "
                            f"{unread[1]}")
            if said:
                out[v.version] = "; ".join(said)
                continue
        out[v.version] = None
        held_spec = spec
        held = [w for w in found[:i + 1] if cannot_read(v, w) is None]
    return out


def key_schemas(config: Config, ds: Dataset) -> tuple[tuple[WriterSchema, ...], str | None]:
    """The key subject's versions, each refused when its key is not one value or is of another
    type than the versions before it, and the name of a record key's one field (the newest
    readable version's)."""
    found = versions(config, ds.key_subject_name)
    if not found:
        raise ConfigError(f"key subject {ds.key_subject_name!r} has no version in the schema registry at "
                          f"{config.registry.url}", key=f"datasets.{ds.name}.key_subject")
    want = None  # the key's type: the first readable version's
    out, field = [], None
    for v in found:
        try:
            name, t = _debezium_key(ds, v.schema_str) if ds.debezium else KEYS[ds.key_format](v.schema_str)
            why = None
        except (ValueError, KeyError, TypeError) as e:
            name, t, why = None, None, f"key subject {ds.key_subject_name} version {v.version} (id {v.id}): {e}"
        if why is None and want is not None and t != want:
            why = f"key subject {ds.key_subject_name} version {v.version} (id {v.id}) is {t}, not {want}"
        if why is None:
            want, field = t, name
        out.append(WriterSchema(id=v.id, version=v.version, schema_str=v.schema_str, refused=why))
    return tuple(out), field


def _debezium_key(ds: Dataset, schema_str: str) -> tuple[None, str]:
    """A Debezium key (an Avro record of the table's primary-key fields): it must hold the
    dataset's key fields (each read as text for the key checks)."""
    if ds.key_format != "avro":
        raise ValueError(f"a Debezium key in {ds.key_format} is not read (key_format: avro, or string for JSON)")
    schema = json.loads(schema_str)
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        raise ValueError("a Debezium key is a record of the table's primary-key fields")
    have = [f["name"] for f in schema["fields"]]
    missing = [k for k in ds.keys if k not in have]
    if missing:
        raise ValueError(f"the key record has no field {missing[0]!r} (it has {', '.join(have)})")
    return None, "record<" + ",".join(ds.keys) + ">"


def _avro_key(schema_str: str) -> tuple[str | None, str]:
    """(the field of a one-field record key, or None for a primitive; the key's Spark type)."""
    schema = json.loads(schema_str)
    if isinstance(schema, dict) and schema.get("type") == "record":
        if len(schema["fields"]) != 1:
            raise ValueError("a record key of several fields is not read as one key value")
        f = avro.fields(schema_str)
        (name, spec), = f.items()
        return name, spec.type
    wrapped = {"type": "record", "name": "K", "fields": [{"name": "k", "type": schema}]}
    return None, avro.fields(json.dumps(wrapped))["k"].type


def _json_key(schema_str: str) -> tuple[str | None, str]:

    schema = json.loads(schema_str)
    if isinstance(schema, dict) and schema.get("type") == "object":
        f = jsonschema.fields(schema_str)
        if len(f) != 1:
            raise ValueError("an object key of several properties is not read as one key value")
        (name, spec), = f.items()
        return name, spec.type
    wrapped = {"type": "object", "properties": {"k": schema}}
    return None, jsonschema.fields(json.dumps(wrapped))["k"].type


KEYS = {"avro": _avro_key, "json-schema": _json_key}


def _writer_refusal(ds: Dataset, v: Version, reader: Version, refused: str | None,
                    cannot_read: Readability) -> str | None:
    """Why the tables (at version ``reader``) hold no record written with ``v`` (None: they
    do): ``v`` was refused as their schema (``refused``: why), or the reader cannot read it."""
    problem = f"it is refused as the tables' schema ({refused})" if refused is not None else cannot_read(reader, v)
    if problem is None:
        return None
    return (f"written with subject {ds.subject_name} version {v.version} (id {v.id}), which the tables (version "
            f"{reader.version}) cannot hold: {problem}")


def schema_type(ds: Dataset) -> str:

    return SCHEMA_TYPES[ds.format]


class Follower:
    """A dataset's subject followed while data flows: ``current()`` before each micro-batch
    asks the registry for the subject's versions (one call) and resolves the dataset again
    only when they changed, reading only the new versions.

    A subject it has read versions of that the registry then answers it does not know (404) is
    waited out like an outage, within the same ``registry.retry_seconds``, with one line saying
    so (in a CI run an Apicurio at the registry's URL answered so right after a restart, and the
    stream failed on it: ``tests/integration/test_registry_restart.py``); still not there then,
    a ``ConfigError`` names the subject. For a subject never read the 404 is the answer, at once.

    A dataset resolved already (a job's, by ``loglake.jobs.entry.execute``) is followed from
    there: the versions it was resolved with are not read again. A version refused as the
    tables' schema is said once, when the follower first sees it (``reader``: whose follower
    it is, in that line)."""

    def __init__(self, config: Config, ds: Dataset, reader: str = "speed"):
        self.config, self.base = config, ds
        self.reader = reader
        self.known: list[Version] = []
        self.ds: Dataset | None = None
        if ds.registry is not None:
            self.known = [Version(version=w.version, id=w.id, schema_type=schema_type(ds), schema_str=w.schema_str)
                          for w in ds.registry.writers]
            self.ds = ds
            self._say_refused()

    def current(self) -> tuple[Dataset, bool]:
        """(the dataset resolved, whether that changed since the last call)."""
        subject = self.base.subject_name
        numbers = sorted(self._numbers(subject))
        if self.ds is not None and numbers == [v.version for v in self.known]:
            return self.ds, False
        have = {v.version: v for v in self.known}
        if any(n not in numbers for n in have):  # a version deleted: read them all again
            have = {}
        found = []
        for n in numbers:
            if n not in have:
                have[n] = version(self.config, subject, n)
            found.append(have[n])
        before = self.ds
        self.known, self.ds = found, resolve(self.config, self.base, found)
        changed = before is None or before.registry != self.ds.registry
        if changed:
            self._say_refused()
        return self.ds, changed

    def _say_refused(self) -> None:
        if self.ds.registry.refused:
            print(f"loglake: {self.reader} {self.base.name}: {self.ds.registry.refused}; records written with it are "
                  "quarantined as incompatible_schema", file=sys.stderr, flush=True)

    def _numbers(self, subject: str) -> list[int]:
        """The subject's version numbers, one call waited out while the registry does not answer
        and, for a subject read before, while it answers that the subject is not there."""
        c, url, what = registry.client(self.config), self.config.registry.url, f"versions of {subject}"
        seconds = self.config.registry.retry_seconds
        deadline = time.monotonic() + seconds  # one budget for the outage and the missing subject

        def ask() -> list[int]:
            try:
                return registry.call(self.config, what, lambda: c.get_versions(subject), max(0.0, deadline - time.monotonic()))
            except Exception as e:
                if self.known and registry._not_found(e):
                    raise _Unlisted() from e
                raise

        def say(attempt: int, error: BaseException, delay: float) -> None:
            if attempt == 1:
                print(f"loglake: {self.base.name}: the schema registry at {url} answers that subject {subject} "
                      f"({_read(self.known)}) is not there; waiting up to {seconds:g}s for it as for an outage",
                      file=sys.stderr, flush=True)

        try:
            return retry_transient(ask, what=f"schema registry {what}", only=_Unlisted, seconds=seconds,
                                   max_delay=5.0, on_retry=say)
        except _Unlisted:
            raise ConfigError(f"subject {subject!r} ({_read(self.known)}) is not in the schema registry at {url}, "
                              f"still not after {seconds:g}s: it was deleted, or the registry lost its state",
                              key=f"datasets.{self.base.name}.subject") from None


class _Unlisted(Exception):
    """A subject read before, answered as not in the registry (404)."""


def _read(known: list[Version]) -> str:
    """``version 1 read before`` / ``versions 1, 2 read before``."""
    return f"version{'s' if len(known) > 1 else ''} {', '.join(str(v.version) for v in known)} read before"


def schema_status(config: Config, ds: Dataset) -> dict:
    """``loglake.schema_versions.schema_status`` for any dataset: for a registry format also its
    subject, the version the tables take and what was refused; the registry away (or the
    subject not registered yet) is said, not raised."""
    if not ds.in_registry:
        return schema_versions.schema_status(config, ds)
    try:
        ds = resolve(config, ds, versions(config, ds.subject_name, seconds=5.0))
    except LoglakeError as e:
        return schema_versions.status_shape(format=ds.format, subject=ds.subject_name, registry_error=str(e))
    return {**schema_versions.schema_status(config, ds), "subject": ds.subject_name, "subject_version": ds.registry.version,
            "schema_id": ds.registry.id, "registry_refused": ds.registry.refused}
