"""The class-data sharing archives (``loglake.local.cds``) of Spark's drivers and of the
embedded broker, as JVMs take them.

``make setup-test`` dumps the archive from a mirror of Spark's launcher and jars (hard links
under the cache), so a fresh clone whose venv links the same installed files keeps it. Each
check starts the real launcher with ``-Xshare:on``, which makes a JVM that cannot map the
archive fail instead of starting without it, silently.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from loglake.core.config import Config, Profile
from loglake.jobs.launch import cds_archive, spark_home
from loglake.local import cds
from loglake.local.broker import EmbeddedKafka, kafka_archive


def spark_home_at(place: Path, link: bool) -> Path:
    """Spark's launcher and jars at ``place``: hard links of this venv's (a clone whose venv
    links the same installed files) or copies (a reinstall: the same bytes, other files)."""
    for sub in ("bin", "jars"):
        (place / sub).mkdir(parents=True)
        for name in os.listdir(spark_home() / sub):
            src = spark_home() / sub / name
            if src.is_file():
                (os.link if link else shutil.copy2)(src, place / sub / name)
    return place


def test_the_archive_serves_this_install_and_a_clone_linking_its_files_not_a_reinstall(tmp_path):
    archive = cds_archive()
    assert archive.exists(), f"{archive}: `make setup-test` makes it (python -m loglake.local.cds)"
    config = Config("cds", Profile.model_validate({}), {}, home=tmp_path / "state", conf_dir=tmp_path)
    assert cds.serves(archive, config) is None
    assert cds.serves(archive, config, spark_home_at(tmp_path / "clone" / "pyspark", link=True)) is None
    refused = cds.serves(archive, config, spark_home_at(tmp_path / "reinstall" / "pyspark", link=False))
    assert refused and "mismatch" in refused, refused


def test_the_broker_starts_with_its_archive(tmp_path, monkeypatch):
    archive = kafka_archive()
    assert archive.exists(), f"{archive}: `make setup-test` makes it (python -m loglake.local.cds)"
    # -Xshare:on: a JVM that cannot map the archive fails to start, and so does the broker.
    monkeypatch.setenv("KAFKA_OPTS", f"{os.environ.get('KAFKA_OPTS', '')} -Xshare:on -Xlog:class+load=info")
    broker = EmbeddedKafka.on_free_ports(tmp_path / "kafka")
    try:
        log = broker.log_path.read_text()
        assert "kafka.Kafka source: shared objects file (top)" in log, log[-2000:]
    finally:
        broker.stop()
