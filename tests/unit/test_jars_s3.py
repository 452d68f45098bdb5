"""The s3 jar set (``loglake.local.jars``) and the Spark settings of an ``s3a://`` lake
(``loglake.jobs.launch.spark_conf``): no JVM, no Maven, no store here."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from loglake.core.config import load_config
from loglake.core.errors import SetupError
from loglake.jobs import launch
from loglake.local import jars
from loglake.testing import write_conf

CREDENTIALS = "/etc/loglake/s3-credentials"
STORE = {"endpoint": "http://store.internal:7070", "region": "eu-west-3", "credentials_file": CREDENTIALS,
         "path_style": True}


# --- the jar set ---------------------------------------------------------------------------


@pytest.fixture
def logstore_copy(tmp_path, monkeypatch) -> Path:
    """jars.py's view of the log store project: a copy to edit."""
    copy = tmp_path / "s3-logstore"
    shutil.copytree(jars.LOGSTORE_PROJECT, copy)
    monkeypatch.setattr(jars, "LOGSTORE_PROJECT", copy)
    return copy


def test_an_edit_of_the_log_store_makes_the_s3_set_out_of_date(logstore_copy):
    before = jars.stamp_value("s3")
    assert jars.stamp_value("s3") == before
    source = next(logstore_copy.rglob("S3ConditionalLogStore.java"))
    source.write_text(source.read_text() + "\n")
    assert jars.stamp_value("s3") != before
    source.write_text(source.read_text()[:-1])
    assert jars.stamp_value("s3") == before
    (source.parent / "Another.java").write_text("package io.loglake.storage; class Another {}\n")
    assert jars.stamp_value("s3") != before


def test_an_edit_of_the_spark_extension_makes_the_spark_set_out_of_date(tmp_path, monkeypatch):
    copy = tmp_path / "spark-ext"
    shutil.copytree(jars.SPARK_EXT_PROJECT, copy)
    monkeypatch.setattr(jars, "SPARK_EXT_PROJECT", copy)
    before = jars.stamp_value("spark")
    source = next(copy.rglob("BoundedCollect.java"))
    source.write_text(source.read_text() + "\n")
    assert jars.stamp_value("spark") != before
    args = jars.build_args("spark", Path("/settings.xml"), Path("/cache/jars/.spark.tmp-1"))
    assert args[args.index("-f") + 1] == str(copy / "pom.xml")


def test_the_sets_only_resolved_build_nothing_of_their_own():
    """(Their stamps: tests/unit/test_jars_stamp.py.)"""
    for kind in ("kafka", "registry"):
        assert jars.build_args(kind, Path("S"), Path("O")) is None and jars.own_sources(kind) == []


def test_the_log_store_is_built_outside_the_repo():
    args = jars.build_args("s3", Path("/settings.xml"), Path("/cache/jars/.s3.tmp-1"))
    assert args[args.index("-f") + 1] == str(jars.LOGSTORE_PROJECT / "pom.xml")
    assert "package" in args and "-Dbuild.dir=/cache/jars/.s3.tmp-1/.build" in args


@pytest.fixture
def pyspark_ships(monkeypatch):
    shipped = {"hadoop-client-api": "3.4.1", "hadoop-client-runtime": "3.4.1", "slf4j-api": "2.0.16"}
    monkeypatch.setattr(jars, "pyspark_jars", lambda: (Path("/venv/pyspark/jars"), shipped))
    return shipped


@pytest.mark.parametrize("names, problem", [
    (["hadoop-aws-3.4.1.jar", "bundle-2.24.6.jar", "loglake-s3-logstore.jar"], None),
    (["hadoop-aws-3.4.2.jar", "bundle-2.29.52.jar"], "hadoop-aws-3.4.2.jar is not of the version of pyspark's "
                                                      "hadoop-client-api-3.4.1.jar"),
    (["hadoop-aws-3.4.1.jar", "bundle-2.24.6.jar", "hadoop-client-api-3.4.1.jar"],
     "hadoop-client-api-3.4.1.jar duplicates pyspark's hadoop-client-api-3.4.1.jar"),
    (["hadoop-aws-3.4.1.jar", "slf4j-api-1.7.36.jar"],
     "slf4j-api-1.7.36.jar duplicates pyspark's slf4j-api-2.0.16.jar"),
])
def test_the_s3_set_against_what_pyspark_ships(pyspark_ships, names, problem):
    problems = jars.check_s3_set(names)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems


# --- Spark's settings for an s3a:// lake ---------------------------------------------------


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A pyspark install and a jar cache with the s3 set, both stand-ins."""
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    for name in ("slf4j-api-2.0.16.jar", "spark-core_2.13-4.0.0.jar"):
        (home / "jars" / name).write_bytes(b"PK")
    monkeypatch.setattr(launch, "spark_home", lambda: home)
    monkeypatch.setattr(launch, "cds_archive", lambda: tmp_path / "no-archive.jsa")
    monkeypatch.setenv("LOGLAKE_CACHE", str(tmp_path / "cache"))
    for kind, names in (("spark", ["delta-spark_2.13-4.0.1.jar", "delta-storage-4.0.1.jar"]),
                        ("s3", ["bundle-2.24.6.jar", "hadoop-aws-3.4.1.jar", jars.LOGSTORE_JAR])):
        d = tmp_path / "cache" / "jars" / kind
        d.mkdir(parents=True)
        for name in names:
            (d / name).write_bytes(b"PK")
    cache = tmp_path / "cache" / "jars"
    return SimpleNamespace(home=home, s3=cache / "s3", spark=cache / "spark")


def _conf(tmp_path, store: dict | None = STORE, root: str = "s3a://lake/prod", **kwargs) -> dict[str, str]:
    lake = {"root": root, **({"object_store": store} if store is not None else {})}
    conf_dir = write_conf(tmp_path / "c", "localhost:9", lake=lake, java_options="", **kwargs)
    return launch.spark_conf(load_config(conf_dir, home=tmp_path / "state"))


def test_an_s3a_lake_gets_s3a_the_sdk_and_loglakes_log_store(tmp_path, installed):
    conf = _conf(tmp_path)
    assert conf["spark.delta.logStore.s3a.impl"] == "io.loglake.storage.S3ConditionalLogStore" == launch.S3_LOG_STORE
    # A streaming checkpoint's files created the same way (offsets/N: one micro-batch, one range).
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == \
        "io.loglake.storage.S3ConditionalCheckpointFileManager" == launch.S3_CHECKPOINT_MANAGER
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://store.internal:7070"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-3"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"  # http://
    # The log store extends delta-storage: it joins the spark set in spark.jars.
    assert conf["spark.jars"].split(",") == [str(installed.spark / "delta-spark_2.13-4.0.1.jar"),
                                             str(installed.spark / "delta-storage-4.0.1.jar"),
                                             str(installed.s3 / jars.LOGSTORE_JAR)]


def test_the_sdk_comes_after_sparks_own_jars_on_the_class_path(tmp_path, installed):
    """The bundle holds unshaded netty, SLF4J 1.7 and httpclient: Spark's must come first, as its
    launcher orders them (which also keeps the driver's CDS archive usable)."""
    conf = _conf(tmp_path)
    expected = [str(installed.home / "jars" / "slf4j-api-2.0.16.jar"), str(installed.home / "jars" / "*"),
                str(installed.s3 / "bundle-2.24.6.jar"), str(installed.s3 / "hadoop-aws-3.4.1.jar")]
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
        assert conf[key].split(":") == expected


def test_credentials_come_from_the_file_in_each_jvm_never_from_the_settings(tmp_path, installed):
    conf = _conf(tmp_path)
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == \
        "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider"
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert f"-Daws.sharedCredentialsFile={CREDENTIALS}" in conf[key].split(), conf[key]
    # loglake's own driver options stay first (its logging)
    assert conf["spark.driver.extraJavaOptions"].startswith("-Dlog4j2.configurationFile=")
    assert not any("secret" in k.lower() or "access.key" in k for k in conf)


def test_aws_itself_and_the_default_chain(tmp_path, installed):
    conf = _conf(tmp_path, store={"region": "us-east-2", "path_style": False})
    assert "spark.hadoop.fs.s3a.endpoint" not in conf and "spark.hadoop.fs.s3a.aws.credentials.provider" not in conf
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert "aws.sharedCredentialsFile" not in conf["spark.driver.extraJavaOptions"]
    assert "spark.executor.extraJavaOptions" not in conf  # local mode: the driver's JVM runs the tasks
    https = _conf(tmp_path / "https", store={"endpoint": "https://s3.example.net"})
    assert https["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"


def test_an_s3a_root_without_a_store_block_is_aws_s3(tmp_path, installed):
    conf = _conf(tmp_path, store=None)
    assert conf["spark.delta.logStore.s3a.impl"] == launch.S3_LOG_STORE
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"


def test_a_lake_on_a_filesystem_gets_none_of_it(tmp_path, installed):
    conf = _conf(tmp_path, store=None, root=str(tmp_path / "lake"))
    assert not [k for k in conf if "s3a" in k or "ClassPath" in k]
    assert jars.LOGSTORE_JAR not in conf["spark.jars"]


def test_the_profiles_settings_still_win(tmp_path, installed):
    conf = _conf(tmp_path, spark={"conf": {"spark.hadoop.fs.s3a.path.style.access": "false",
                                           "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
                                           "spark.driver.extraClassPath": "/opt/jdbc/driver.jar",
                                           "spark.driver.extraJavaOptions": "-Daws.profile=lake"}})
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert conf["spark.delta.logStore.s3a.impl"] == "io.delta.storage.S3SingleDriverLogStore"
    # a class path and JVM options are joined, not replaced: the profile's first and last respectively
    assert conf["spark.driver.extraClassPath"].split(":")[0] == "/opt/jdbc/driver.jar"
    assert str(installed.s3 / "hadoop-aws-3.4.1.jar") in conf["spark.driver.extraClassPath"].split(":")
    assert conf["spark.driver.extraJavaOptions"].endswith(
        f"-Daws.sharedCredentialsFile={CREDENTIALS} -Daws.profile=lake")


def test_an_s3a_lake_without_the_s3_set_says_to_run_setup(tmp_path, installed):
    shutil.rmtree(installed.s3)
    with pytest.raises(SetupError, match="no s3 jars .* run `make setup`"):
        _conf(tmp_path)
