"""The pattern table of tests/unit/test_regex.py against Java's own regex engine, and a
pattern Java refuses named as loglake's configuration error (issue 11, item 6)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from loglake.core.errors import ConfigError
from loglake.jobs.entry import known_jvm_error
from tests.unit.test_regex import PATTERNS

pytestmark = pytest.mark.integration

READS_DIFFERENTLY = {r"[a&&b]"}  # Java compiles it, as an intersection: refused all the same


def test_the_checker_agrees_with_java(spark):
    compile_ = spark._jvm.java.util.regex.Pattern.compile
    for pattern, refused in PATTERNS:
        try:
            compile_(pattern)
            java_refuses = False
        except Exception:  # Py4J's error, as PySpark converts it
            java_refuses = True
        assert java_refuses == (refused and pattern not in READS_DIFFERENTLY), pattern


def test_a_pattern_java_refuses_at_run_time_is_a_permanent_config_error(spark):
    with pytest.raises(Exception) as e:
        spark.range(1).select(F.lit("a").rlike("a\\0")).collect()
    known = known_jvm_error(e.value)
    assert isinstance(known, ConfigError) and not known.transient
    assert "not a valid Java regular expression" in str(known) and "a\\\\0" in str(known)
    assert known_jvm_error(RuntimeError("something else")) is None
