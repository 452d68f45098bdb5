"""The jar sets' stamps (``loglake.local.jars.stamp_value``): what decides a set, not where the
repo is. A fresh clone at another path finds the cache's sets current (each re-run of Maven
took 3-12 s of every clean clone's setup); an edit of a POM or of loglake's own jar's sources
makes the set anew."""

from __future__ import annotations

import shutil

import pytest

from loglake.core.paths import REPO_ROOT
from loglake.local import jars


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """The repo's setup/ and jvm/ at another path, as jars.py finds them there."""
    root = tmp_path / "elsewhere" / "loglake"
    shutil.copytree(REPO_ROOT / "setup", root / "setup")
    shutil.copytree(REPO_ROOT / "jvm", root / "jvm", ignore=shutil.ignore_patterns("target", ".build"))
    monkeypatch.setattr(jars, "REPO_ROOT", root)
    monkeypatch.setattr(jars, "LOGSTORE_PROJECT", root / "jvm" / "s3-logstore")
    monkeypatch.setattr(jars, "SPARK_EXT_PROJECT", root / "jvm" / "spark-ext")
    return root


def test_the_stamps_follow_the_files_not_the_path(clone):
    moved = {kind: jars.stamp_value(kind) for kind in jars.KINDS}
    for kind in jars.KINDS:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(jars, "REPO_ROOT", REPO_ROOT)
            m.setattr(jars, "LOGSTORE_PROJECT", REPO_ROOT / "jvm" / "s3-logstore")
            m.setattr(jars, "SPARK_EXT_PROJECT", REPO_ROOT / "jvm" / "spark-ext")
            assert jars.stamp_value(kind) == moved[kind], kind
    pom = clone / "setup" / "pom-kafka.xml"
    pom.write_text(pom.read_text() + "\n<!-- edited -->\n")
    assert jars.stamp_value("kafka") != moved["kafka"]
    source = next(p for p in sorted((clone / "jvm" / "s3-logstore" / "src").rglob("*")) if p.is_file())
    source.write_text(source.read_text() + "\n// edited\n")
    assert jars.stamp_value("s3") != moved["s3"]
