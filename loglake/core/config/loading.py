"""The loaded configuration (``Config``: one profile, every dataset, the paths they imply) and
its loading from ``conf/``: environment and file references expanded, secrets checked,
every error naming its file and key."""

from __future__ import annotations

import logging
import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from loglake.core import objectstore, paths
from loglake.core.contracts import SystemTable
from loglake.core.errors import ConfigError, KeyedValueError, refusal_recorder
from loglake.core.config.base import TABLE_LAYERS, _ENV_REF, _FILE_REF, _TRANSFORM_FILE
from loglake.core.config.dataset import Dataset
from loglake.core.config.kafka import KafkaSettings, embedded_ca_file
from loglake.core.config.settings import ObjectStoreSettings, Profile, RegistrySettings


class Config:
    """The loaded configuration: one profile and every dataset, plus derived paths."""

    def __init__(self, profile_name: str, profile: Profile, datasets: dict[str, Dataset],
                 home: Path, conf_dir: Path, env_refs: dict[str, str] | None = None):
        self.profile_name = profile_name
        self.profile = profile
        self.datasets = datasets
        self.home = home
        self.conf_dir = conf_dir
        # Profile key (``kafka.security.password``) → the environment variable its value came from.
        self.env_refs = env_refs or {}

    @property
    def kafka(self) -> KafkaSettings:
        return self.profile.kafka

    @property
    def registry(self) -> RegistrySettings:
        """The profile's schema registry; an error naming the key when it has none."""
        if self.profile.registry is None:
            raise ConfigError(f"profile {self.profile_name!r} has no schema registry: set registry.url (or "
                              "registry.embedded: true), which datasets in avro, protobuf or json-schema need",
                              key=f"profiles.{self.profile_name}.registry")
        return self.profile.registry

    @property
    def lake_root(self) -> str:
        return self.profile.lake.root or str(self.home / "lake")

    @property
    def lock_root(self) -> str:
        """Where the dataset leases live (``lake.locks``, else beside the tables): a directory,
        or an ``s3a://`` location on the lake's object store."""
        return (self.profile.lake.locks or f"{self.lake_root.rstrip('/')}/_loglake_locks").removeprefix("file:")

    @property
    def object_store(self) -> ObjectStoreSettings | None:
        """The object store the lake, its checkpoints or its leases are on (None: all on filesystems)."""
        lake = self.profile.lake
        if lake.object_store is not None:
            return lake.object_store
        if any(objectstore.is_remote(u) for u in (lake.root, lake.checkpoints, lake.locks)):
            return ObjectStoreSettings()
        return None

    @property
    def checkpoint_root(self) -> str:
        return self.profile.lake.checkpoints or str(self.home / "checkpoints")

    def dataset(self, name: str) -> Dataset:
        try:
            return self.datasets[name]
        except KeyError:
            known = ", ".join(sorted(self.datasets)) or "none"
            raise ConfigError(f"unknown dataset {name!r}; known datasets: {known}", key="dataset") from None

    def table_path(self, dataset: Dataset | str, layer: str) -> str:
        """Location of a dataset's table for ``layer`` (speed, batch, quarantine, latest, history)."""
        ds = self.dataset(dataset) if isinstance(dataset, str) else dataset
        if layer not in TABLE_LAYERS:
            raise ValueError(f"layer must be one of {TABLE_LAYERS}, not {layer!r}")
        name = getattr(ds.tables, layer)
        if name is None:
            raise ConfigError(f"dataset {ds.name} has no {layer} table", key=f"datasets.{ds.name}.tables.{layer}")
        schema, _, table = name.partition(".")
        return f"{self.lake_root.rstrip('/')}/{schema}/{table}"

    def system_table_path(self, table: SystemTable) -> str:
        """Location of one of loglake's own tables (``loglake.core.contracts.LEDGER``, ...)."""
        return table.path(self.lake_root)

    def checkpoint_path(self, dataset: Dataset | str, job: str = "speed") -> str:
        ds = self.dataset(dataset) if isinstance(dataset, str) else dataset
        return f"{self.checkpoint_root.rstrip('/')}/{job}/{ds.name}"

    @property
    def kafka_ca_file(self) -> str | None:
        """The CA file loglake's Kafka clients trust: ``kafka.security.ca_file``, else (embedded
        broker) the one loglake generated under the state directory (``<state>/cluster/`` for the
        nodes of a local cluster, which share it); None without security."""
        sec = self.kafka.security
        if sec is None:
            return None
        return sec.ca_file or str(embedded_ca_file(self.broker_home))

    @property
    def broker_home(self) -> Path:
        """Where the embedded broker's security files live under (``<home>/kafka/security``):
        the state directory, or ``<state>/cluster`` for the local cluster's nodes."""
        return self.home / "cluster" if self.profile.local_cluster is not None else self.home

    def kafka_client_conf(self, **extra: Any) -> dict[str, Any]:
        """Settings for a confluent-kafka client: bootstrap, security, then ``extra``.

        librdkafka's log lines (retries, "Coordinator load in progress", ...) go to the
        ``loglake.kafka`` Python logger instead of stderr: the CLI keeps them in its log file.
        """
        sec = self.kafka.security
        security: dict[str, Any] = {}
        if sec is not None:
            # A refused login shows only as an error event: kept, so a failed call can name it.
            security = {**sec.librdkafka(self.kafka_ca_file),
                        "error_cb": refusal_recorder(self.kafka.bootstrap_servers)}
        return {"bootstrap.servers": self.kafka.bootstrap_servers, "logger": logging.getLogger("loglake.kafka"),
                **security, **self.kafka.client, **extra}

    def kafka_java_conf(self) -> dict[str, str]:
        """Java client settings for Spark's Kafka source (it takes each as ``kafka.<key>``):
        security, then ``kafka.spark``. Built in the job's driver from its own environment,
        so a password never travels on a command line."""
        sec = self.kafka.security
        return {**(sec.java(self.kafka_ca_file) if sec else {}), **self.kafka.spark}

    def kafka_credentials_hint(self) -> str:
        """Where the Kafka user and password of this profile come from (for error messages)."""
        sec = self.kafka.security
        if sec is None:
            return f"profile {self.profile_name!r} has no kafka.security"
        refs = [f"{k} from {v}" for k, v in ((k, self.env_refs.get(f"kafka.security.{k}")) for k in
                                              ("username", "password")) if v]
        return f"user {sec.username!r}, {sec.mechanism}, {', '.join([*refs, f'profile {self.profile_name}'])}"

    def replace(self, *, profile: Profile | None = None, datasets: dict[str, Dataset] | None = None,
                home: Path | None = None) -> "Config":
        return Config(self.profile_name, profile or self.profile, datasets or self.datasets,
                      home or self.home, self.conf_dir, self.env_refs)


def _expand_env(value: Any, file: str, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _expand_env(v, file, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise ConfigError(f"environment variable {name} is not set (referenced as ${{{name}}})",
                                  file=file, key=key)
            return os.environ[name]

        def read(m: re.Match) -> str:
            try:
                return Path(m.group(1)).read_text().rstrip("\r\n")
            except OSError as e:
                raise ConfigError(f"cannot read {m.group(1)} (referenced as ${{file:{m.group(1)}}}): "
                                  f"{e.strerror or e}", file=file, key=key) from None
        return _FILE_REF.sub(read, _ENV_REF.sub(sub, value))
    return value


# Profile keys that hold a secret: conf/ may only name the environment variable it comes from.
_SECRET_KEYS = ("kafka.security.password", "kafka.client.sasl.password", "kafka.spark.sasl.jaas.config",
                "registry.password")


def _env_refs(value: Any, key: str = "") -> dict[str, str]:
    """Dotted key → variable name, for each value that is exactly one ``${VAR}``."""
    if isinstance(value, dict):
        return {k2: v2 for k, v in value.items() for k2, v2 in _env_refs(v, f"{key}.{k}" if key else str(k)).items()}
    if isinstance(value, str):
        m = _ENV_REF.fullmatch(value.strip())
        return {key: m.group(1)} if m else {}
    return {}


def _check_secrets_referenced(raw: dict, file: str, prefix: str) -> None:
    """A secret written into conf/ is refused: it must come from the environment (``${VAR}``)."""
    for dotted in _SECRET_KEYS:
        value: Any = raw
        for part in dotted.split(".", 2):  # kafka, section, key (client keys have dots of their own)
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        if not isinstance(value, str) or not (_ENV_REF.search(value) or _FILE_REF.search(value)):
            example = "LOGLAKE_" + "_".join(p for p in dotted.split(".") if p != "security").upper()
            raise ConfigError(f"a secret is written into conf/: reference an environment variable or a file "
                              f"instead (e.g. ${{{example}}} or ${{file:/run/secrets/…}}); conf/ is committed, "
                              f"the environment and the secret files are not",
                              file=file, key=f"{prefix}.{dotted}")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", file=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping at the top level, found {type(data).__name__}", file=str(path))
    return data


def _raise_validation(e: ValidationError, file: str, prefix: str = "") -> None:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",))
    loc = loc.replace("schema_", "schema")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, KeyedValueError):
        loc = ".".join(p for p in (loc, cause.key) if p)
    key = ".".join(p for p in (prefix, loc) if p)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling against docs/configuration.md)"
    elif err["type"] == "missing":
        msg = "required key is missing"
    elif err["type"] == "literal_error":
        msg = f"{msg}, found {err.get('input')!r}"
    elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
        msg = f"{msg}, found {err['input']!r}"
    more = f" (and {len(e.errors()) - 1} more problem(s) in this file)" if len(e.errors()) > 1 else ""
    raise ConfigError(msg + more, file=file, key=key) from None


def load_dataset(path: Path) -> Dataset:
    """Load and validate one dataset file; its name defaults to the file's stem."""
    data = _read_yaml(path)
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ConfigError(f"name {data['name']!r} differs from the file name {path.stem!r}",
                          file=str(path), key="name")
    data.setdefault("topic", data["name"])
    name = data["name"]
    if "registry" in data:
        raise ConfigError("registry is set by loglake from the schema registry, not in a file: remove it (the "
                          "registry itself is the profile's registry:, the subject the dataset's subject:)",
                          file=str(path), key="registry")
    if isinstance(data.get("code"), str):
        data["code"] = str((path.parent / data["code"]).resolve())
    elif "code" not in data and path.with_suffix(".py").is_file():  # the dataset's code beside its file
        data["code"] = str(path.with_suffix(".py").resolve())
    if isinstance(data.get("transform"), str) and _TRANSFORM_FILE.match(data["transform"]):
        file, _, func = data["transform"].rpartition(":")  # a file named relative to the dataset's
        data["transform"] = f"{(path.parent / file).resolve()}:{func}"
    tables = data.setdefault("tables", {})
    if isinstance(tables, dict):
        for layer in ("speed", "batch", "quarantine"):
            tables.setdefault(layer, f"{layer}.{name}")
        if data.get("kind") == "changelog":
            tables.setdefault("latest", f"speed.{name}_latest")
    try:
        return Dataset.model_validate(data)
    except ValidationError as e:
        _raise_validation(e, str(path))
        raise  # unreachable


# The login of the registry LOGLAKE_REGISTRY_URL names (the compose stack's): the user, the file
# holding its password (a secret file, never the password itself in the environment) and the CA
# of its certificate. Each given alone where the profile's own section has none.
_REGISTRY_LOGIN_ENV = {"LOGLAKE_REGISTRY_USERNAME": "username", "LOGLAKE_REGISTRY_PASSWORD_FILE": "password",
                       "LOGLAKE_REGISTRY_CA_FILE": "ca_file"}


def _registry_login_from_env(main: str) -> dict[str, str]:
    found = {}
    for var, key in _REGISTRY_LOGIN_ENV.items():
        value = os.environ.get(var)
        if not value:
            continue
        if key == "password":
            try:
                value = Path(value).read_text().strip()
            except OSError as e:
                raise ConfigError(f"environment variable {var} names {value!r}, which cannot be read ({e.strerror}): "
                                  "expected the file holding the registry password", file=main,
                                  key="registry.password") from None
            if not value:
                raise ConfigError(f"the registry password file {os.environ[var]!r} ({var}) is empty", file=main,
                                  key="registry.password")
        found[f"registry.{key}"] = value
    return found


def load_config(conf_dir: Path | str | None = None, profile: str | None = None,
                overrides: dict[str, Any] | None = None, home: Path | str | None = None) -> Config:
    """Load ``conf/`` and validate it.

    What the conf says is checked against what the lake holds by ``loglake.schema_versions.check_all``
    (a schema change the tables cannot take), which every entry point calls after this.

    ``profile`` defaults to ``$LOGLAKE_PROFILE``, then the file's ``default_profile``.
    ``overrides`` maps dotted profile keys to values (``{"kafka.bootstrap_servers": ...}``);
    ``$LOGLAKE_KAFKA_BOOTSTRAP`` overrides ``kafka.bootstrap_servers``.
    """
    conf = Path(conf_dir) if conf_dir else paths.conf_dir()
    main = conf / "loglake.yaml"
    data = _read_yaml(main)
    unknown = set(data) - {"default_profile", "profiles"}
    if unknown:
        raise ConfigError("unknown key (expected default_profile, profiles)", file=str(main),
                          key=sorted(unknown)[0])
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict) or not profiles:
        raise ConfigError("expected a mapping of profile name to settings", file=str(main), key="profiles")
    name = profile or os.environ.get("LOGLAKE_PROFILE") or data.get("default_profile") or "local"
    if name not in profiles:
        raise ConfigError(f"unknown profile {name!r}; known profiles: {', '.join(profiles)}",
                          file=str(main), key="default_profile" if not profile else "profile")
    _check_secrets_referenced(profiles[name] or {}, str(main), f"profiles.{name}")
    env_refs = _env_refs(profiles[name] or {})
    for dotted in _SECRET_KEYS:
        var = env_refs.get(dotted)
        if var and os.environ.get(var) == "":
            raise ConfigError(f"environment variable {var} is empty (referenced as ${{{var}}}): set it to the "
                              "secret (an empty one is never assumed)", file=str(main), key=f"profiles.{name}.{dotted}")
    raw = _expand_env(profiles[name] or {}, str(main), f"profiles.{name}")
    merged = dict(overrides or {})
    if os.environ.get("LOGLAKE_KAFKA_BOOTSTRAP"):
        merged.setdefault("kafka.bootstrap_servers", os.environ["LOGLAKE_KAFKA_BOOTSTRAP"])
    if os.environ.get("LOGLAKE_REGISTRY_URL"):  # names the registry, in a profile with none too
        merged.setdefault("registry.url", os.environ["LOGLAKE_REGISTRY_URL"])
        merged.update(_registry_login_from_env(str(main)))
    else:
        stray = [var for var in _REGISTRY_LOGIN_ENV if os.environ.get(var)]
        if stray:  # a login for no registry: said, not ignored
            raise ConfigError(f"environment variable {stray[0]} is set but LOGLAKE_REGISTRY_URL is not: the login "
                              "variables go with the registry it names (set it, or unset them)", file=str(main),
                              key="registry")
    if os.environ.get("LOGLAKE_SERVICES_COMMAND"):
        try:
            words = shlex.split(os.environ["LOGLAKE_SERVICES_COMMAND"])
        except ValueError as e:
            raise ConfigError(f"environment variable LOGLAKE_SERVICES_COMMAND is not a command a shell would "
                              f"split ({e})", file=str(main), key="deployment.services_command") from None
        merged.setdefault("deployment.services_command", words)
    for dotted, value in merged.items():
        section, _, leaf = dotted.partition(".")  # "kafka.bootstrap_servers"
        if leaf:
            raw[section] = {**(raw.get(section) or {}), leaf: value}
        else:
            raw[section] = value
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as e:
        _raise_validation(e, str(main), f"profiles.{name}")
        raise
    datasets: dict[str, Dataset] = {}
    topics: dict[str, str] = {}
    for path in sorted((conf / "datasets").glob("*.yaml")):
        ds = load_dataset(path)
        if ds.topic in topics:
            raise ConfigError(f"topic {ds.topic!r} is already used by dataset {topics[ds.topic]!r}",
                              file=str(path), key="topic")
        topics[ds.topic] = ds.name
        datasets[ds.name] = ds
    home_path = Path(home) if home else paths.state_home()
    return Config(name, prof, datasets, home_path, conf, env_refs)
