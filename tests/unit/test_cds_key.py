"""The class-data sharing archive's key (``loglake.jobs.launch.cds_archive``): no JVM here.

A JVM refuses an archive whose jars changed since it was dumped (it checks each jar's size
and modification time, and that each class path entry is the file it was) and then starts
without it, silently. A reinstalled pyspark with new files under the same names needs
another archive, made again at setup; a fresh clone whose venv links the same installed
files (the wheelhouse) keeps it. tests/integration/test_cds.py starts the JVMs.
"""

from __future__ import annotations

import os

import pytest

from loglake.jobs import launch


@pytest.fixture
def spark_home(tmp_path, monkeypatch):
    (tmp_path / "jars").mkdir()
    for name in ("spark-core_2.13-4.0.0.jar", "delta-spark_2.13-4.0.1.jar"):
        (tmp_path / "jars" / name).write_bytes(b"PK" + name.encode())
    monkeypatch.setattr(launch, "spark_home", lambda: tmp_path)
    launch.cds_archive.cache_clear()
    yield tmp_path
    launch.cds_archive.cache_clear()


def key() -> str:
    launch.cds_archive.cache_clear()
    return launch.cds_archive().name


def test_the_same_install_keeps_its_archive(spark_home):
    assert key() == key()


def test_jars_reinstalled_under_the_same_names_need_another_archive(spark_home):
    before = key()
    jar = spark_home / "jars" / "spark-core_2.13-4.0.0.jar"
    jar.write_bytes(jar.read_bytes())  # the same name and content, written again (a fresh venv)
    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert key() != before
    jar.write_bytes(jar.read_bytes() + b"x")  # another build of it
    assert key() != before


def test_a_clone_linking_the_same_installed_files_keeps_the_archive(spark_home, tmp_path_factory, monkeypatch):
    before = key()
    other = tmp_path_factory.mktemp("clone") / ".venv" / "pyspark"
    (other / "jars").mkdir(parents=True)
    for name in os.listdir(spark_home / "jars"):
        os.link(spark_home / "jars" / name, other / "jars" / name)
    monkeypatch.setattr(launch, "spark_home", lambda: other)
    assert key() == before
    # The cache on another file system: no hard links, the archive names the venv's paths.
    monkeypatch.setattr(launch, "cds_can_link", lambda: False)
    assert key() != before


def test_making_an_archive_keeps_only_the_last_used_others(tmp_path):
    from loglake.local import cds

    archives = []
    for i in range(5):
        a = tmp_path / f"spark-{i:016x}.jsa"
        a.write_bytes(b"x")
        a.with_suffix(".log").write_text("log")
        os.utime(a, (1_000_000 + i, 1_000_000 + i))  # used in this order
        archives.append(a)
    mine = archives[0]  # the oldest, but this install's
    gone = cds.prune(mine)
    assert sorted(gone) == archives[1:3]
    assert sorted(tmp_path.glob("*.jsa")) == [mine, *archives[3:]]
    assert not archives[1].with_suffix(".log").exists() and mine.with_suffix(".log").exists()
