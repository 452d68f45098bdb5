"""Where Spark's launcher and jars are (``loglake.core.paths.pyspark_home``), also in a driver
that spark-submit started.

Defect found by make test (stop of 2026-11-29): spark-submit puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on a Python driver's path, and the pyspark wheel
ships that zip, so ``import pyspark`` in the shared Spark application came from the zip and
loglake looked for the jars inside it (``…/pyspark.zip/pyspark/jars``: not a directory): the
application died at start, and every batch job waited 120 s for it before running alone.
"""

from __future__ import annotations

import os
import subprocess
import sys

from loglake.core.paths import REPO_ROOT, pyspark_home

PRINT = "from loglake.jobs.launch import spark_home; print(spark_home())"


def test_the_wheel_directory_with_its_jars_and_launcher():
    home = pyspark_home()
    assert home is not None and (home / "jars").is_dir() and (home / "bin" / "spark-submit").is_file()


def test_a_driver_importing_pyspark_from_the_zip_finds_the_wheels_directory():
    home = pyspark_home()
    archive = home / "python" / "lib" / "pyspark.zip"
    assert archive.is_file(), "the pyspark wheel ships python/lib/pyspark.zip (spark-submit puts it on the path)"
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH")}
    for extra in ({}, {"SPARK_HOME": str(home)}):  # as spark-submit sets it, and without
        env = {**base, **extra, "PYTHONPATH": os.pathsep.join([str(archive), str(REPO_ROOT)])}
        r = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)\n" + PRINT], env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        imported, found = r.stdout.split()
        assert ".zip" in imported  # the situation: pyspark came from the zip
        assert found == str(home), r.stdout
