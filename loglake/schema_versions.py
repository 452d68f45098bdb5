"""Schema versions of a dataset: which changes apply while data flows, which are refused.

A dataset's schema (``conf/datasets/<name>.yaml``) changes over time. loglake records each
form it ran with in ``_ledger/schemas`` (``loglake.core.contracts.SCHEMAS``: dataset, version,
the fields as JSON, what changed), and the version in force is recorded with what was
validated under it: each ledger range (``schema_version``) and each speed micro-batch's
Delta commit (``userMetadata``: ``{"loglake_schema_version": N}``).

What is compared: the conf against the newest recorded version, and against the
tables themselves (their current Delta schema is the reference for a column's type), so
a conf edited by mistake is refused before anything runs — by every CLI command right after
it loads the conf (``loglake status`` says it), by every Spark job before its session
starts, by the DAGs' plan task — and never rewrites a table.

Additive (applied; the next writer records a new version and evolves its tables):
  a new field with ``required: false``; a required field made optional; a validation
  rule changed (enum values, min/max, pattern: what is quarantined from now on).
Breaking (refused, naming dataset, field, old and new form and the ways forward):
  a field's type changed; a field removed or renamed; a field made required; a new
  required field; the key or the kind changed.

No Spark here (the CLI, Airflow and the jobs share it); reads through delta-rs.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import socket
from dataclasses import dataclass

from loglake.core.config import Config, Dataset
from loglake.core.contracts import SCHEMAS
from loglake.core.errors import SchemaChangeError
from loglake.tables import layer_table, open_table, query

# A dataset field's type → the Delta type its column has (as delta-rs names it). A registry
# dataset's field types are Spark SQL types (``delta_type``).
DELTA_TYPES = {"string": "string", "long": "long", "double": "double", "boolean": "boolean",
               "timestamp": "timestamp", "bigint": "long", "int": "integer", "smallint": "short",
               "tinyint": "byte", "float": "float", "binary": "binary", "date": "date",
               "timestamp_ntz": "timestamp_ntz"}


def delta_type(field_type: str) -> str:
    """How delta-rs names the column type of a field of ``field_type`` (a nested type by its
    kind only: struct, array, map)."""
    if field_type in DELTA_TYPES:
        return DELTA_TYPES[field_type]
    kind = field_type.partition("<")[0]
    return kind if kind in ("struct", "array", "map") else field_type
_RULES = ("enum", "min", "max", "pattern")
WAYS_FORWARD = ("safe ways forward: add a new field with required: false (old rows read it as null), or "
                "create a new dataset (a new file under conf/datasets/, its own topic or the same data "
                "re-produced) and backfill it from the log; see docs/configuration.md, Changing a schema")


def spec_of(ds: Dataset) -> dict:
    """What validation and the tables depend on: kind, key and each field's type, whether it is
    required and its rules (descriptions left out: they change nothing)."""
    fields = {}
    for name, f in ds.fields.items():
        fields[name] = {"type": f.type, "required": f.required,
                        **{r: getattr(f, r) for r in _RULES if getattr(f, r) is not None}}
    # The envelope only when not the plain one: a dataset's fingerprint from before it was known stays.
    return {"kind": ds.kind, "key": ds.key, "fields": fields, **({"envelope": ds.envelope} if ds.debezium else {})}


def fingerprint(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _form(f: dict | None) -> str:
    if f is None:
        return "absent"
    rules = ", ".join(f"{r} {f[r]!r}" for r in _RULES if r in f)
    return f"{f['type']}, {'required' if f['required'] else 'optional'}" + (f", {rules}" if rules else "")


@dataclass(frozen=True)
class Change:
    """One difference between two forms of a dataset's schema."""

    field: str          # the field (or "key", "kind")
    what: str           # added | made_optional | rules | type | removed | made_required | added_required | key | kind
    old: str
    new: str
    breaking: bool

    def describe(self) -> str:
        words = {"added": "new optional field", "made_optional": "made optional", "rules": "validation rule changed",
                 "type": "type changed", "removed": "removed (or renamed)", "made_required": "made required",
                 "added_required": "new field is required", "key": "key changed", "kind": "kind changed"}[self.what]
        return f"{self.field}: {words} ({self.old} → {self.new})"


def compare(old: dict, new: dict) -> list[Change]:
    """The changes from schema form ``old`` to ``new`` (both ``spec_of`` dicts)."""
    out = []
    for attr in ("kind", "key"):
        if old.get(attr) != new.get(attr):
            out.append(Change(attr, attr, str(old.get(attr)), str(new.get(attr)), True))
    of, nf = old["fields"], new["fields"]
    added = [n for n in nf if n not in of]
    for name in of:
        if name not in nf:
            twin = [a for a in added if nf[a]["type"] == of[name]["type"]]
            renamed = f"; renamed to {twin[0]}?" if len(twin) == 1 else ""
            out.append(Change(name, "removed", _form(of[name]), "absent" + renamed, True))
            continue
        o, n = of[name], nf[name]
        if o["type"] != n["type"]:
            out.append(Change(name, "type", o["type"], n["type"], True))
        if o["required"] != n["required"]:
            out.append(Change(name, "made_required" if n["required"] else "made_optional", _form(o), _form(n),
                              n["required"]))
        if any(o.get(r) != n.get(r) for r in _RULES):
            out.append(Change(name, "rules", _form(o), _form(n), False))
    for name in added:
        f = nf[name]
        out.append(Change(name, "added_required" if f["required"] else "added", "absent", _form(f), f["required"]))
    return out


def describe_changes(changes: list[Change]) -> str:
    return "; ".join(c.describe() for c in changes) or "no change"


# --- what is recorded, what the tables hold ---------------------------------------------


def recorded_versions(config: Config, ds: Dataset | str) -> list[dict]:
    """The dataset's recorded schema versions, oldest first (``fields`` parsed)."""

    name = ds if isinstance(ds, str) else ds.name
    table = open_table(config.system_table_path(SCHEMAS), store=config.object_store)
    if table is None:
        return []
    rows = query(table, f"SELECT * FROM t WHERE dataset = '{name}' ORDER BY version, recorded_at")
    seen, out = set(), []
    for r in rows:
        if r["version"] in seen:  # two writers recorded the same version at once: the first stands
            continue
        seen.add(r["version"])
        out.append({**r, "spec": json.loads(r["fields"])})
    return out


def current_version(config: Config, ds: Dataset) -> dict | None:
    """The recorded version matching the dataset's conf as it is now (None: not recorded yet)."""
    fp = fingerprint(spec_of(ds))
    versions = recorded_versions(config, ds)
    return versions[-1] if versions and versions[-1]["fingerprint"] == fp else None


def table_columns(config: Config, ds: Dataset) -> dict[str, dict[str, str]]:
    """``layer → {column: Delta type}`` of the dataset's typed tables that exist (speed, batch, latest)."""

    out = {}
    for layer in ("speed", "batch", "latest"):
        if getattr(ds.tables, layer, None) is None:
            continue
        table = layer_table(config, ds, layer)
        if table is not None:
            out[layer] = {f.name: getattr(f.type, "type", str(f.type)) for f in table.schema().fields}
    return out


def breaking_changes(config: Config, ds: Dataset, recorded: list[dict] | None = None,
                     columns: dict[str, dict[str, str]] | None = None) -> list[Change]:
    """What in the dataset's conf would break its tables: against the newest recorded
    version, and each field's type against the column the tables already hold (``recorded``
    and ``columns``: ``recorded_versions`` and ``table_columns``, read already)."""
    new = spec_of(ds)
    versions = recorded if recorded is not None else recorded_versions(config, ds)
    found = [c for c in compare(versions[-1]["spec"], new) if c.breaking] if versions else []
    typed = {c.field for c in found if c.what == "type"}
    held = columns if columns is not None else table_columns(config, ds)
    for layer, have_columns in held.items():
        for name, f in new["fields"].items():
            have = have_columns.get(name)
            if name not in typed and have is not None and have != delta_type(f["type"]):
                typed.add(name)
                found.append(Change(name, "type", f"{have} (column of {getattr(ds.tables, layer)})", f["type"], True))
    return found


def check(config: Config, ds: Dataset) -> None:
    """Refuse the dataset's conf when it would break its tables (``SchemaChangeError``)."""
    if not ds.resolved:  # a registry format's fields: checked by each writer once it read the registry
        return
    found = breaking_changes(config, ds)
    if found:
        first = found[0]
        raise SchemaChangeError(ds.name, describe_changes(found), WAYS_FORWARD,
                                file=str(config.conf_dir / "datasets" / f"{ds.name}.yaml"),
                                key=f"schema.{first.field}" if first.what not in ("key", "kind") else first.what)


def check_all(config: Config) -> None:
    """``check`` every dataset (at config load). A lake that cannot be read from here (an
    object store without credentials on this host) is not checked now: each writer checks
    again before it writes (``loglake/lake/evolution.py``), where a failed read is an error."""

    for ds in config.datasets.values():
        try:
            check(config, ds)
        except OSError as e:
            logging.getLogger("loglake.schema_versions").info("schema check of %s skipped: the lake is not readable "
                                                      "here (%s)", ds.name, str(e).splitlines()[0])
            return


# --- recording a version (the writers, before they write) --------------------------------


def new_version_row(config: Config, ds: Dataset) -> dict | None:
    """The row to record when the conf is a form not recorded yet (None: it is the newest
    recorded one). Raises ``SchemaChangeError`` for a breaking change."""
    check(config, ds)
    spec = spec_of(ds)
    versions = recorded_versions(config, ds)
    fp = fingerprint(spec)
    if versions and versions[-1]["fingerprint"] == fp:
        return None
    change = describe_changes(compare(versions[-1]["spec"], spec)) if versions else "first recorded"
    try:
        who = f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:
        who = socket.gethostname()
    return {"dataset": ds.name, "version": (versions[-1]["version"] + 1) if versions else 1, "fingerprint": fp,
            "fields": json.dumps(spec, sort_keys=True), "change": change, "recorded_by": who}


# Every key of a dataset's schema status, for any format (None where it does not apply): the
# format; a registry format's subject, the version its tables take, its id, what the registry
# refused or why it could not be asked; the recorded version, when, its change, a breaking
# change refused, a change the next writer will record.
STATUS_KEYS = ("format", "subject", "subject_version", "schema_id", "registry_refused", "registry_error",
               "version", "recorded_at", "change", "refused", "pending")


def status_shape(**given) -> dict:
    """A schema status with every key of ``STATUS_KEYS`` (those not given None)."""
    unknown = set(given) - set(STATUS_KEYS)
    if unknown:
        raise KeyError(f"not schema status keys: {', '.join(sorted(unknown))}")
    return {key: given.get(key) for key in STATUS_KEYS}


def schema_status(config: Config, ds: Dataset) -> dict:
    """What ``loglake status`` and the UI say of the dataset's schema: its format, the version
    in force, a change the next writer will record, or a breaking change refused. A registry
    format's dataset resolved (``loglake.schemaregistry.resolve.schema_status`` says the rest)."""
    return status_shape(format=ds.format, **_recorded_status(config, ds))


def _recorded_status(config: Config, ds: Dataset) -> dict:
    versions = recorded_versions(config, ds)
    newest = versions[-1] if versions else None
    out = {"version": newest["version"] if newest else None,
           "recorded_at": newest["recorded_at"] if newest else None, "change": newest["change"] if newest else None}
    refused = breaking_changes(config, ds)
    if refused:
        return {**out, "refused": describe_changes(refused)}
    if newest is not None and newest["fingerprint"] != fingerprint(spec_of(ds)):
        out["pending"] = describe_changes(compare(newest["spec"], spec_of(ds)))
    return out


def format_text(st: dict) -> str:
    """``json`` or ``avro, subject S version 2 (schema id 7)`` and what the registry refused."""
    if st["format"] == "json":
        return "json (the schema is the dataset's conf)"
    head = f"{st['format']}, subject {st['subject']}"
    if st["registry_error"]:
        return f"{head}: {st['registry_error']}"
    head += f" version {st['subject_version']} (schema id {st['schema_id']})"
    if st["registry_refused"]:
        head += f"; REFUSED: {st['registry_refused']}"
    return head


def schema_text(st: dict) -> str:
    if st["registry_error"]:
        return "unknown until the registry answers"
    if st["refused"]:
        return f"REFUSED breaking change ({st['refused']}): nothing runs until the conf is put back; {WAYS_FORWARD}"
    head = "not recorded yet (the first writer records it)" if st["version"] is None else (
        f"version {st['version']} ({st['change']})")
    if st["pending"]:
        head += f"; the conf adds {st['pending']}: the next writer records it as a new version"
    return head
