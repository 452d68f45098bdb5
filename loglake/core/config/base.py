"""What every part of the configuration shares: strict models, names and forms."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict



FieldType = Literal["string", "long", "double", "boolean", "timestamp"]
# How a topic's values are written: JSON checked against the dataset's ``schema:`` block, or
# a Schema Registry wire format (a magic byte, a 4-byte schema id, the payload) whose schema
# the registry holds (``loglake.schemaregistry``).
Format = Literal["json", "avro", "protobuf", "json-schema"]
REGISTRY_FORMATS = ("avro", "protobuf", "json-schema")
LAYERS = ("speed", "batch", "quarantine", "latest")
# Every table a dataset may have: its layers, and a changelog's SCD type 2 history (``history: scd2``).
TABLE_LAYERS = (*LAYERS, "history")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# ``${file:/run/secrets/kafka_password}``: the file's content (a secret the process reads where it
# runs, as Kafka's and Docker's secrets are given, rather than an environment variable every child inherits).
_FILE_REF = re.compile(r"\$\{file:([^}]+)\}")
_TRANSFORM_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function
_TRANSFORM_FILE = re.compile(r"^(?P<file>.+\.py):(?P<func>[A-Za-z_]\w*)$")  # /path/to/file.py:function
_TABLE_NAME = re.compile(r"^(speed|batch|quarantine)\.[A-Za-z_]\w*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENT_DOT = re.compile(r"^[A-Za-z0-9_.-]+$")
_EXPECTATION = re.compile(r"^expect_[a-z0-9_]+$")
MIN_VACUUM_RETENTION_HOURS = 168.0  # Delta's own default guard: 7 days
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|s|minutes?|min)\s*$")
_SCRAM_USER = re.compile(r"^[A-Za-z0-9._@-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
