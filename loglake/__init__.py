"""loglake: Kafka is the truth; Delta tables are views of it."""

import logging

__version__ = "0.1.0"

# A library prints nothing by itself: without a handler on the way up, Python's
# last-resort handler would write loglake's (and librdkafka's) warnings to stderr.
# The CLI adds a file handler (<state>/logs/cli.log); applications add their own.
logging.getLogger("loglake").addHandler(logging.NullHandler())


def connect(conf_dir=None, profile=None, *, home=None, spark=None):
    """Connect to loglake's tables from Python (``loglake.api.Lake``): ``lake.sql(...)``,
    ``lake.table(...)``, ``lake.arrow(...)``. See docs/python-api.md."""
    from loglake.api import connect as _connect

    return _connect(conf_dir, profile, home=home, spark=spark)
