"""Configuration is validated at load; every error names the file and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from loglake.core import paths
from loglake.core.config import load_config
from loglake.core.contracts import QUALITY_RESULTS
from loglake.core.errors import ConfigError


@pytest.fixture
def conf(tmp_path) -> Path:
    shutil.copytree(paths.REPO_ROOT / "conf", tmp_path / "conf")
    return tmp_path / "conf"


def edit(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_shipped_config_loads(conf):
    c = load_config(conf, home="/tmp/x")
    assert set(c.datasets) == {"job_views", "company_ceos"}
    jv = c.dataset("job_views")
    assert jv.topic == "job_views" and jv.kind == "events" and jv.key == "user_id"
    assert all(f.required for f in jv.fields.values())
    assert c.dataset("company_ceos").tables.latest == "speed.company_ceos_latest"
    assert c.table_path(jv, "speed") == "/tmp/x/lake/speed/job_views"
    assert c.table_path(jv, "quarantine") == "/tmp/x/lake/quarantine/job_views"
    assert c.checkpoint_path(jv) == "/tmp/x/checkpoints/speed/job_views"
    assert c.profile.speed.trigger_seconds == 5.0
    assert [(e.label, e.severity) for e in jv.quality] == [
        ("expect_column_values_to_be_unique(view_id)", "fail"),
        ("expect_column_values_to_be_between(duration_ms)", "warn")]
    assert c.system_table_path(QUALITY_RESULTS) == "/tmp/x/lake/_quality_results"


def test_statistics_are_kept_of_provenance_key_and_zorder_columns(conf):
    c = load_config(conf, home="/tmp/x")
    assert c.dataset("job_views").stats_columns == ["_topic", "_partition", "_offset", "_layer", "user_id"]
    edit(conf / "datasets" / "job_views.yaml", lambda d: d["maintenance"].update(zorder_by=["job_id", "user_id"]))
    assert load_config(conf).dataset("job_views").stats_columns == [
        "_topic", "_partition", "_offset", "_layer", "user_id", "job_id"]
    assert load_config(conf).dataset("company_ceos").stats_columns[-1] == "company_id"


def test_topic_defaults_to_dataset_name(conf):
    edit(conf / "datasets" / "job_views.yaml", lambda d: d.pop("topic", None))
    assert load_config(conf).dataset("job_views").topic == "job_views"


def test_overrides_and_env_bootstrap(conf, monkeypatch):
    c = load_config(conf, overrides={"kafka.bootstrap_servers": "h1:1,h2:2"})
    assert c.kafka.bootstrap_servers == "h1:1,h2:2"
    monkeypatch.setenv("LOGLAKE_KAFKA_BOOTSTRAP", "k:9093")
    assert load_config(conf).kafka.port == 9093


# (file, mutation, key named in the message, fragment of the message)
BAD_DATASET = [
    (lambda d: d["schema"]["user_id"].update(type="integer"), "schema.user_id.type", "'string'"),
    (lambda d: d.update(key="nope"), "key", "key 'nope' is not a field"),
    (lambda d: d.update(partitions=0), "partitions", "greater than or equal to 1"),
    (lambda d: d.update(transform="no_colon"), "transform", "package.module:function"),
    (lambda d: d["schema"]["source"].update(enum=[1, 2]), "schema.source.enum", "not of the field's type"),
    (lambda d: d["schema"]["duration_ms"].update(min=10, max=1), "schema.duration_ms.min", "greater than max"),
    (lambda d: d["schema"]["view_id"].update(pattern="(unclosed"), "schema.view_id.pattern", "not a valid regular"),
    (lambda d: d["schema"].update(_offset={"type": "long"}), "schema", "provenance"),
    (lambda d: d.update(colour="blue"), "colour", "unknown key"),
    (lambda d: d.update(kind="table"), "kind", "'events' or 'changelog'"),
    (lambda d: d["tables"].update(speed="fast.job_views") if "tables" in d else d.update(
        tables={"speed": "fast.job_views"}), "tables.speed", "<speed|batch|quarantine>.<name>"),
    (lambda d: d["quality"][0].update(expectation="values_unique"), "quality.0.expectation", "starting with expect_"),
    (lambda d: d["quality"][1].update(column="dur"), "quality.1.column", "column 'dur' is not a field"),
    (lambda d: d["quality"][1].update(severity="error"), "quality.1.severity", "'warn' or 'fail'"),
    (lambda d: d["quality"][1]["kwargs"].update(column="x"), "quality.1.kwargs.column", "column key"),
    (lambda d: d["maintenance"].update(zorder_by=["nope"]), "maintenance.zorder_by.0", "not a field"),
]


def refusal(conf, dataset: str, mutate) -> tuple[ConfigError, str]:
    """The error loading ``conf`` gives once ``dataset``'s file is mutated; the file's path."""
    path = conf / "datasets" / f"{dataset}.yaml"
    edit(path, mutate)
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    return e.value, str(path)


@pytest.mark.parametrize("mutate,key,fragment", BAD_DATASET)
def test_bad_dataset_names_file_and_key(conf, mutate, key, fragment):
    error, path = refusal(conf, "job_views", mutate)
    msg = str(error)
    assert path in msg and error.file == path
    assert error.key == key, msg
    assert fragment in msg, msg


def test_changelog_needs_latest_table(conf):
    path = conf / "datasets" / "company_ceos.yaml"
    edit(path, lambda d: d["tables"].update(latest=None))
    with pytest.raises(ConfigError, match="tables.latest"):
        load_config(conf)


# A changelog's envelope and history (issue 48): each misuse names its key.
BAD_CHANGELOG = [
    (lambda d: d.update(key=["company_id", "company"]), "key", "needs a record key that holds them all"),
    (lambda d: d.update(key=[]), "key", "at least one field"),
    (lambda d: d.update(envelope="debezium", key=["company_id", "nope"]), "key", "key 'nope' is not a field"),
    (lambda d: d.update(envelope="maxwell"), "envelope", "'plain' or 'debezium'"),
    (lambda d: d.update(history="scd4"), "history", "'none' or 'scd2'"),
    (lambda d: d.update(history="scd2", schema={**d["schema"], "valid_to": {"type": "timestamp"}}), "history",
     "field named 'valid_to'"),
    (lambda d: d["tables"].update(history="batch.ceo_versions"), "tables.history", "history: scd2"),
]


@pytest.mark.parametrize("mutate,key,fragment", BAD_CHANGELOG)
def test_bad_changelog_envelope_or_history_names_file_and_key(conf, mutate, key, fragment):
    error, path = refusal(conf, "company_ceos", mutate)
    assert error.key == key and error.file == path, str(error)
    assert fragment in str(error), str(error)


@pytest.mark.parametrize("mutate,key,fragment", [
    (lambda d: d.update(envelope="debezium"), "envelope", "for changelog datasets only"),
    (lambda d: d.update(history="scd2"), "history", "for changelog datasets only"),
])
def test_an_events_dataset_takes_no_envelope_or_history(conf, mutate, key, fragment):
    error, _path = refusal(conf, "job_views", mutate)
    assert error.key == key and fragment in str(error), str(error)


def test_a_debezium_changelog_with_history_has_a_compound_key_and_a_history_table(conf):
    edit(conf / "datasets" / "company_ceos.yaml",
         lambda d: d.update(envelope="debezium", history="scd2", key=["company_id", "company"]))
    ds = load_config(conf).dataset("company_ceos")
    assert ds.keys == ["company_id", "company"] and ds.debezium
    assert ds.tables.history == "batch.company_ceos_history"
    assert ds.stats_columns[4:6] == ["company_id", "company"]


def test_duplicate_topic_is_rejected(conf):
    edit(conf / "datasets" / "company_ceos.yaml", lambda d: d.update(topic="job_views"))
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    assert e.value.key == "topic" and "already used by dataset 'company_ceos'" in str(e.value)


BAD_PROFILE = [
    (lambda d: d["profiles"]["local"]["kafka"].update(bootstrap_servers="nohost"), "profiles.local.kafka.bootstrap_servers",
     "host:port"),
    (lambda d: d["profiles"]["local"]["speed"].update(trigger_interval="soon"), "profiles.local.speed.trigger_interval",
     "interval"),
    (lambda d: d["profiles"]["local"]["speed"].update(max_offsets_per_trigger=0),
     "profiles.local.speed.max_offsets_per_trigger", "greater than or equal to 1"),
    (lambda d: d["profiles"]["local"]["speed"].update(max_bytes_per_trigger="64 MB"),
     "profiles.local.speed.max_bytes_per_trigger", "'64 MB' is not a size such as '64m'"),
    (lambda d: d["profiles"]["local"]["kafka"].update(bootstrap="x:1"), "profiles.local.kafka.bootstrap", "unknown key"),
    (lambda d: d.update(default_profile="prod"), "default_profile", "unknown profile 'prod'"),
    (lambda d: d["profiles"]["local-cluster"]["kafka"].update(min_insync_replicas=4),
     "profiles.local-cluster.kafka.min_insync_replicas", "exceeds replication_factor (3)"),
    (lambda d: d["profiles"]["local-cluster"]["kafka"].update(replication_factor=0),
     "profiles.local-cluster.kafka.replication_factor", "greater than or equal to 1"),
    (lambda d: d["profiles"]["local-cluster"]["local_cluster"].update(worker_memory="lots"),
     "profiles.local-cluster.local_cluster.worker_memory", "memory size"),
    (lambda d: d["profiles"]["local-cluster"]["local_cluster"].update(spark_workers=0),
     "profiles.local-cluster.local_cluster.spark_workers", "greater than or equal to 1"),
]


@pytest.mark.parametrize("mutate,key,fragment", BAD_PROFILE)
def test_bad_profile_names_file_and_key(conf, mutate, key, fragment):
    path = conf / "loglake.yaml"
    edit(path, mutate)
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile=key.split(".")[1] if key.startswith("profiles.") else None)
    assert e.value.file == str(path) and e.value.key == key, str(e.value)
    assert fragment in str(e.value)


def test_unset_secret_is_an_error_not_empty(conf, monkeypatch):
    for var in ("LOGLAKE_KAFKA_BOOTSTRAP", "LOGLAKE_KAFKA_USERNAME"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError) as e:
        load_config(conf, profile="cluster")
    assert "LOGLAKE_KAFKA_BOOTSTRAP is not set" in str(e.value)
    assert e.value.key == "profiles.cluster.kafka.bootstrap_servers"


def test_cluster_profile_expands_environment(conf, monkeypatch, tmp_path):
    secret = tmp_path / "kafka_password"
    secret.write_text("p\n")
    for var, val in {"LOGLAKE_KAFKA_BOOTSTRAP": "b1:9096", "LOGLAKE_KAFKA_USERNAME": "u",
                     "LOGLAKE_KAFKA_PASSWORD_FILE": str(secret), "LOGLAKE_LAKE_ROOT": "s3a://b/lake",
                     "LOGLAKE_CHECKPOINT_ROOT": "s3a://b/cp", "LOGLAKE_SPARK_MASTER": "yarn",
                     "LOGLAKE_KAFKA_CA_FILE": "/ca.pem", "LOGLAKE_S3_ENDPOINT": "http://s3:7070",
                     "LOGLAKE_AWS_REGION": "eu-west-1", "LOGLAKE_S3_CREDENTIALS_FILE": "/run/secrets/s3"}.items():
        monkeypatch.setenv(var, val)
    c = load_config(conf, profile="cluster")
    assert c.kafka_client_conf()["sasl.password"] == "p"  # read from the file, its newline dropped
    assert c.kafka_client_conf()["ssl.ca.location"] == c.kafka_java_conf()["ssl.truststore.location"] == "/ca.pem"
    assert 'username="u" password="p";' in c.kafka_java_conf()["sasl.jaas.config"]
    assert c.table_path("job_views", "speed") == "s3a://b/lake/speed/job_views"
    store = c.object_store
    assert (store.endpoint, store.region, store.credentials_file) == ("http://s3:7070", "eu-west-1", "/run/secrets/s3")
    assert c.lock_root == "s3a://b/lake/_loglake_locks"  # the leases on the store, beside the tables


def test_invalid_yaml_names_file(conf):
    (conf / "datasets" / "job_views.yaml").write_text("schema: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        load_config(conf)
    assert e.value.file.endswith("job_views.yaml")


def test_unknown_dataset_lists_known(conf):
    with pytest.raises(ConfigError, match="known datasets: company_ceos, job_views"):
        load_config(conf).dataset("nope")


def test_provenance_columns_are_the_tables_own(conf):
    """Quality and Z-order may name the provenance columns every table has (``_kafka_timestamp``),
    and only those: ``_timestamp`` is no column of any table, so config load refuses it."""
    from loglake.core.contracts import PROVENANCE

    path = conf / "datasets" / "job_views.yaml"

    def use(column):
        def fn(d):
            d["quality"] = [{"expectation": "expect_column_values_to_not_be_null", "column": column}]
            d["maintenance"] = {"zorder_by": [column]}
        return fn

    assert "_kafka_timestamp" in PROVENANCE.names
    edit(path, use("_kafka_timestamp"))
    jv = load_config(conf).dataset("job_views")
    assert jv.quality[0].column == "_kafka_timestamp" and jv.maintenance.zorder_by == ["_kafka_timestamp"]
    edit(path, use("_timestamp"))
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    assert e.value.key == "quality.0.column" and "_kafka_timestamp" in str(e.value)
    edit(path, lambda d: d.pop("quality"))
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    assert e.value.key == "maintenance.zorder_by.0"


def test_local_cluster_profile_names_three_nodes_and_a_local_master(conf):
    from loglake.local.cluster import LocalCluster

    c = load_config(conf, profile="local-cluster")
    assert len(c.kafka.ports) == 3 and (c.kafka.replication_factor, c.kafka.min_insync_replicas) == (3, 2)
    cluster = LocalCluster(c)
    assert cluster.master_url == c.profile.spark.master and cluster.bootstrap == c.kafka.bootstrap_servers


def test_cluster_commands_need_a_local_cluster_profile(conf):
    from loglake.local.cluster import LocalCluster

    with pytest.raises(ConfigError) as e:
        LocalCluster(load_config(conf, profile="local"))
    assert e.value.key == "profiles.local.local_cluster"
    path = conf / "loglake.yaml"
    edit(path, lambda d: d["profiles"]["local-cluster"]["spark"].update(master="spark://other-host:7077"))
    with pytest.raises(ConfigError) as e:
        LocalCluster(load_config(conf, profile="local-cluster"))
    assert e.value.key == "profiles.local-cluster.spark.master" and "spark://127.0.0.1:PORT" in str(e.value)


def test_a_local_cluster_needs_a_port_per_node(conf):
    from loglake.local.cluster import LocalCluster

    edit(conf / "loglake.yaml", lambda d: d["profiles"]["local-cluster"]["kafka"].update(
        bootstrap_servers="localhost:19092,localhost:19092,localhost:19094"))
    with pytest.raises(ConfigError) as e:
        LocalCluster(load_config(conf, profile="local-cluster"))
    assert e.value.key == "profiles.local-cluster.kafka.bootstrap_servers" and "names a port twice" in str(e.value)


def test_free_ports_are_distinct():
    from loglake.core.processes import free_ports

    ports = free_ports(8)
    assert len(set(ports)) == 8


def test_a_profiles_jvm_options_come_after_loglakes_own(tmp_path):
    from loglake.jobs.launch import log4j_file, spark_conf
    from loglake.testing import write_conf

    config = load_config(write_conf(tmp_path, "localhost:9", java_options="-XX:TieredStopAtLevel=1",
                                    spark={"master": "spark://127.0.0.1:7077"}), home=tmp_path / "state")
    conf = spark_conf(config)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert conf[key].startswith(f"-Dlog4j2.configurationFile={log4j_file()}"), conf[key]
        assert conf[key].endswith(" -XX:TieredStopAtLevel=1"), conf[key]


def test_a_datasets_transform_is_the_file_beside_it_or_none(conf):
    """User code lives beside its dataset's file: no module of loglake names a dataset."""
    config = load_config(conf, home="/tmp/x")
    views = config.dataset("job_views")
    assert views.code == str((conf / "datasets" / "job_views.py").resolve()) and views.transform is None
    assert views.load_transform().__module__ == "loglake_dataset_code.job_views"
    assert views.code_function("sample") is not None  # loglake produce's generator

    (conf / "datasets" / "job_views.py").unlink()
    assert load_config(conf, home="/tmp/x").dataset("job_views").load_transform()("rows") == "rows"

    (conf / "datasets" / "own.py").write_text("def double(df):\n    return df * 2\n")
    edit(conf / "datasets" / "job_views.yaml", lambda d: d.update(transform="own.py:double"))
    assert load_config(conf, home="/tmp/x").dataset("job_views").load_transform()(21) == 42

    edit(conf / "datasets" / "job_views.yaml", lambda d: d.update(transform="own.py:triple"))
    with pytest.raises(ConfigError, match="cannot load transform") as e:
        load_config(conf, home="/tmp/x").dataset("job_views").load_transform()
    assert e.value.key == "datasets.job_views.transform"

    edit(conf / "datasets" / "job_views.yaml", lambda d: d.update(transform="missing.py:transform"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(conf, home="/tmp/x")


def test_no_module_of_the_framework_names_a_dataset():
    """In code, that is: docstrings may use the shipped datasets as examples."""
    import ast

    names = {p.stem for p in (paths.REPO_ROOT / "conf" / "datasets").glob("*.yaml")}
    found = []
    for top in ("loglake", "spark_jobs", "plugins", "dags"):
        for f in (paths.REPO_ROOT / top).rglob("*.py"):
            tree = ast.parse(f.read_text())
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            found += [(str(f.relative_to(paths.REPO_ROOT)), c.lineno, c.value) for c in ast.walk(tree)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str) and id(c) not in docstrings
                      and any(n in c.value for n in names)]
    assert found == []
