"""Avro schemas as loglake sees them: the Spark type of each field, whether records written
with one schema can be read with another (Avro's own rules, in a JVM), and the Avro schema of a
JSON dataset's conf.

The Spark types are those Spark's own Avro reader (``from_avro``, spark-avro) gives, so the
columns the tables are created with are the columns decoding fills:

- primitives: boolean, int, long → bigint, float, double, bytes/fixed → binary, string/enum → string;
- logical types: date, timestamp-millis/-micros → timestamp, local-timestamp-* → timestamp_ntz,
  decimal → decimal(p,s);
- record → struct, array → array, map → map<string, …>;
- a union with null → the other branch, nullable; [int, long] → bigint; [float, double] → double;
  other unions → struct<member0, member1, …>.

No Spark here: the CLI, the producer and the jobs share it. Readability is Avro's
``SchemaCompatibility`` (``compatibility``), asked in this process's Spark driver when it has one,
else in a small JVM started for the question with the Avro jar pyspark ships.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from loglake.core.config import Dataset, RegistryField
from loglake.core.errors import SetupError

_PRIMITIVE = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
              "bytes": "binary", "string": "string", "null": "void"}


class _Types:
    """Named types seen so far (a record may name a type defined earlier in the schema)."""

    def __init__(self) -> None:
        self.named: dict[str, str] = {}

    def spark(self, t: Any, namespace: str = "") -> tuple[str, bool]:
        """(Spark SQL type, nullable) of Avro type ``t``."""
        if isinstance(t, list):
            return self._union(t, namespace)
        if isinstance(t, str):
            if t in _PRIMITIVE:
                return _PRIMITIVE[t], t == "null"
            full = t if "." in t or not namespace else f"{namespace}.{t}"
            for name in (full, t):
                if name in self.named:
                    return self.named[name], False
            raise ValueError(f"type {t!r} is not defined before its use")
        kind = t.get("type")
        logical = t.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            out = f"decimal({int(t['precision'])},{int(t.get('scale', 0))})"
        elif logical == "date" and kind == "int":
            out = "date"
        elif logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
            out = "timestamp"
        elif logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
            out = "timestamp_ntz"
        elif kind == "record":
            ns = t.get("namespace", namespace)
            name = t["name"] if "." in t["name"] or not ns else f"{ns}.{t['name']}"
            self.named[name] = "struct<>"  # a recursive record: spark-avro refuses it too
            inner = []
            for f in t["fields"]:
                ft, _ = self.spark(f["type"], ns)
                inner.append(f"{f['name']}:{ft}")
            out = f"struct<{','.join(inner)}>"
            self.named[name] = out
            return out, False
        elif kind == "enum":
            out = "string"
            self._name(t, namespace, out)
        elif kind == "fixed":
            out = "binary"
            self._name(t, namespace, out)
        elif kind == "array":
            out = f"array<{self.spark(t['items'], namespace)[0]}>"
        elif kind == "map":
            out = f"map<string,{self.spark(t['values'], namespace)[0]}>"
        elif isinstance(kind, (str, list, dict)):
            return self.spark(kind, namespace)  # {"type": "string"}, {"type": {...}}
        else:
            raise ValueError(f"not an Avro type: {json.dumps(t)[:120]}")
        return out, False

    def _name(self, t: dict, namespace: str, out: str) -> None:
        ns = t.get("namespace", namespace)
        self.named[t["name"] if "." in t["name"] or not ns else f"{ns}.{t['name']}"] = out

    def _union(self, branches: list, namespace: str) -> tuple[str, bool]:
        nullable = any(b == "null" for b in branches)
        rest = [self.spark(b, namespace)[0] for b in branches if b != "null"]
        if not rest:
            return "void", True
        if len(rest) == 1:
            return rest[0], nullable
        if set(rest) <= {"int", "bigint"}:
            return "bigint", nullable
        if set(rest) <= {"float", "double"}:
            return "double", nullable
        return "struct<" + ",".join(f"member{i}:{t}" for i, t in enumerate(rest)) + ">", nullable


def parse(schema_str: str) -> dict:
    schema = json.loads(schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema of a topic's values must be an Avro record (its fields are the table's columns)")
    return schema


def envelope_row(schema_str: str) -> str:
    """The row record of a Debezium envelope (its ``after`` field's, ``["null", Value]``): what
    the tables' columns are. Debezium names it once (in ``before``) and refers to it by name."""
    schema = parse(schema_str)
    if schema.get("type") != "record" or "after" not in {f["name"] for f in schema.get("fields", ())}:
        raise ValueError("not a Debezium envelope: a record with before, after, op and source fields")
    named: dict[str, dict] = {}

    def collect(t, ns: str) -> None:
        if isinstance(t, list):
            for b in t:
                collect(b, ns)
        elif isinstance(t, dict) and t.get("type") == "record":
            ns = t.get("namespace", ns)
            full = t["name"] if "." in t["name"] else f"{ns}.{t['name']}".lstrip(".")
            named[full] = named[t["name"]] = {**t, "namespace": ns} if ns else t
            for f in t.get("fields", ()):
                collect(f["type"], ns)

    collect(schema, schema.get("namespace", ""))
    after = next(f["type"] for f in schema["fields"] if f["name"] == "after")
    for branch in after if isinstance(after, list) else [after]:
        if isinstance(branch, dict) and branch.get("type") == "record":
            return json.dumps(named.get(branch["name"], branch))
        if isinstance(branch, str) and branch in named:
            return json.dumps(named[branch])
    raise ValueError("the envelope's after field is no record")


def fields(schema_str: str) -> dict[str, RegistryField]:
    """The table's fields for the Avro record ``schema_str``, in its order: the Spark type of
    each, ``required`` unless it may be null or has a default."""
    schema = parse(schema_str)
    types = _Types()
    ns = schema.get("namespace", "")
    out = {}
    for f in schema["fields"]:
        t, nullable = types.spark(f["type"], ns)
        out[f["name"]] = RegistryField(type=t, required=not nullable and "default" not in f,
                                       description=f.get("doc", ""))
    return out


# --- which records a schema reads: Avro's own rules, in a JVM -------------------------------

# Avro's verdict on (reader, writer) by the hash of the two texts: it depends on them alone, so a
# process asks once (the stream resolves its subject again whenever a version is added).
_verdicts: dict[bytes, str | None] = {}
# What Avro's schema classes need, as pyspark ships them (and py4j's, to ask them from here).
_JARS = ("avro-1", "jackson-core-", "jackson-databind-", "jackson-annotations-", "slf4j-api-", "py4j-")


@contextmanager
def compatibility() -> Iterator[Callable[[str, str], str | None]]:
    """``cannot_read(reader, writer)``: why Avro cannot read records written with schema
    ``writer`` as schema ``reader`` (None: it can), in Avro's own words: each incompatibility
    ``org.apache.avro.SchemaCompatibility.checkReaderWriterCompatibility`` finds, at the reader's
    field it names (``field 'campaign': READER_FIELD_MISSING_DEFAULT_VALUE``). A text that is not
    an Avro schema raises ``ValueError``.

    Asked in a JVM: this process's Spark driver's when it has one (a job, the stream, the shared
    application); else (the CLI, Airflow) one started for the scope of the ``with`` the first time
    a verdict is not known yet, with pyspark's Avro jar and nothing else (about a second). A
    subject of one version asks nothing."""
    own = None

    def cannot_read(reader: str, writer: str) -> str | None:
        nonlocal own
        if reader == writer:  # a schema reads its own records: nothing to ask
            return None
        key = hashlib.sha256(json.dumps([reader, writer]).encode()).digest()
        if key in _verdicts:
            return _verdicts[key]
        jvm = _driver_jvm()
        if jvm is None:
            if own is None:
                own = _start_jvm()
            jvm = own.jvm
        verdict = _check(jvm, reader, writer)
        _verdicts[key] = verdict
        return verdict

    try:
        yield cannot_read
    finally:
        if own is not None:
            own.shutdown()


def _driver_jvm():
    """The JVM of this process's Spark driver, None when it has none. A job under spark-submit
    has one before its session starts (spark-submit starts the JVM, then Python with its gateway's
    port): it is joined as the session would join it."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
        return SparkContext._jvm
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return SparkContext._jvm


def _start_jvm():
    """A JVM of this process's own with Avro on its class path, reached through py4j (with a
    secret, as pyspark's own gateway is; it exits with this process at the latest)."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    from loglake.core.paths import java_executable, pyspark_home

    home = pyspark_home()
    shipped = home / "jars" if home is not None else None
    found = {prefix: sorted(shipped.glob(f"{prefix}*.jar")) if shipped else [] for prefix in _JARS}
    missing = [prefix.rstrip("-") for prefix, paths in found.items() if not paths]
    if missing:
        raise SetupError(f"Avro's schema rules are asked in a JVM with the jars pyspark ships; not found in "
                         f"{shipped or 'pyspark (not installed)'}: {', '.join(missing)}. Run `make setup`")
    jars = {prefix: str(paths[-1]) for prefix, paths in found.items()}
    port, token = launch_gateway(jarpath=jars["py4j-"], classpath=os.pathsep.join(jars.values()),
                                 javaopts=["-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
                                 die_on_exit=True, enable_auth=True, java_path=java_executable())
    return JavaGateway(gateway_parameters=GatewayParameters(port=port, auth_token=token))


def _check(jvm, reader: str, writer: str) -> str | None:
    """Avro's verdict on reading ``writer``'s records as ``reader``, asked in ``jvm``."""
    from py4j.protocol import Py4JJavaError

    avro = jvm.org.apache.avro
    schemas = []
    for text in (reader, writer):
        try:
            schemas.append(avro.Schema.Parser().parse(text))  # a parser each: both may name one record
        except Py4JJavaError as e:
            raise ValueError(f"not an Avro schema: {e.java_exception.getMessage()}") from None
    result = avro.SchemaCompatibility.checkReaderWriterCompatibility(*schemas).getResult()
    if result.getCompatibility().toString() == "COMPATIBLE":
        return None
    said = []
    for found in result.getIncompatibilities():
        path, message = _field_at(reader, found.getLocation()), found.getMessage()
        where = f"field {'.'.join(path)!r}" if path else "the record"
        detail = f" ({message})" if message and message != (path[-1] if path else None) else ""
        said.append(f"{where}: {found.getType().toString()}{detail}")
    return "; ".join(said)


def _field_at(schema_str: str, location: str) -> list[str]:
    """The names of the reader's fields down to where a ``SchemaCompatibility`` location
    (``/fields/4/type/items/fields/1``) points (``["lines", "qty"]``; [] at the record itself).
    The path stops where the schema names a type defined elsewhere, or at a union's branch (its
    index may be the writer's)."""
    node: Any = json.loads(schema_str)
    names: list[str] = []
    parts = [p for p in location.split("/") if p]
    i = 0
    while i < len(parts) and isinstance(node, dict):
        part = parts[i]
        if part == "fields" and i + 1 < len(parts) and isinstance(node.get("fields"), list):
            try:
                node = node["fields"][int(parts[i + 1])]
            except (ValueError, IndexError):
                break
            names.append(str(node.get("name")))
            i += 2
        elif part in ("type", "items", "values") and part in node:
            node = node[part]
            i += 1
        else:
            break
    return names


# --- a JSON dataset's conf as an Avro schema (``loglake produce --format avro``) ------------

_CONF_TYPES: dict[str, Any] = {"string": "string", "long": "long", "double": "double", "boolean": "boolean",
                               "timestamp": {"type": "long", "logicalType": "timestamp-millis"}}


def schema_of(ds: Dataset) -> str:
    """The Avro record schema of ``ds``'s conf fields (optional ones a union with null, default
    null), named after the dataset."""
    out = []
    for name, spec in ds.fields.items():
        t = _CONF_TYPES[spec.type]
        f: dict[str, Any] = {"name": name, "type": t if spec.required else ["null", t]}
        if not spec.required:
            f["default"] = None
        if spec.description:
            f["doc"] = spec.description
        out.append(f)
    record = {"type": "record", "name": ds.name, "namespace": "loglake.datasets", "fields": out}
    if ds.description:
        record["doc"] = ds.description
    return json.dumps(record)
