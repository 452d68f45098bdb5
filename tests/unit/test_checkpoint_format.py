"""Spark's checkpoint files are Spark's, not an API: ``loglake.speed.checkpoint`` reads the layout
of one Spark version. Another pyspark fails here, so an upgrade reads that layout again before
moving the pin (with the integration tests that read real checkpoints: every stream started
again on its checkpoint records the position it holds; test_transactions' replayed
micro-batch is bounded by its planned span)."""

import pyspark

from loglake.speed import checkpoint


def test_the_checkpoint_reader_is_pinned_to_the_installed_spark():
    installed = ".".join(pyspark.__version__.split(".")[:2])
    assert installed == checkpoint.SPARK_VERSION, (
        f"pyspark {pyspark.__version__}: check loglake/speed/checkpoint.py against this Spark's "
        f"checkpoint layout, then set SPARK_VERSION")
