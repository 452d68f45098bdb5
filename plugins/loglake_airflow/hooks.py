"""``LoglakeHook``: loglake's configuration and the readers a task needs, loaded once per task.

What a provider's hook is to its service: tasks, operators and sensors ask it for a dataset,
its watermarks, the speed layer's lag or a plan, instead of loading the configuration and
building clients themselves. The configuration comes from the environment Airflow's
processes run in (``LOGLAKE_CONF``, ``LOGLAKE_HOME``, ``LOGLAKE_PROFILE``, which
``loglake up`` sets), as the CLI reads it; secrets stay there or in Airflow connections.
Every reader goes through loglake's own functions: delta-rs for the ledger, confluent-kafka
for the log and the consumer group, no JVM.

loglake itself is imported inside the methods: a DAG file that imports this module (through
an operator or a sensor) is parsed without loading loglake, pydantic or confluent-kafka.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from loglake.core.config import Config, Dataset
    from loglake.core.plans import Plan


class LoglakeHook(BaseHook):
    """loglake's configuration and readers for one task.

    The configuration is loaded on first use and kept for the hook's life (one task
    attempt, or one poke of a rescheduled sensor). Methods raise loglake's own errors;
    ``loglake_airflow.errors.loglake_errors`` around the task turns them into Airflow's.
    """

    hook_name = "loglake"

    @functools.cached_property
    def config(self) -> Config:
        from loglake.core.config import load_config

        return load_config()

    def get_conn(self) -> Config:
        """The loaded configuration (loglake holds no connection of its own between calls)."""
        return self.config

    def dataset(self, name: str) -> Dataset:
        """The dataset ``name`` (a ``ConfigError`` naming the known ones if there is none)."""
        return self.config.dataset(name)

    def checked_dataset(self, name: str) -> Dataset:
        """The dataset ``name``, its conf checked against what its tables hold: a breaking
        schema change is a ``SchemaChangeError`` before anything runs."""
        from loglake.schema_versions import check

        ds = self.dataset(name)
        check(self.config, ds)
        return ds

    def topics(self) -> dict[str, int]:
        """Topic → partition count of the cluster's topics."""
        from loglake.kafka.admin import list_topics

        return list_topics(self.config)

    def watermarks(self, ds: Dataset, as_of: datetime | None = None) -> dict[int, int]:
        """Per partition, the batch watermark W_p now (``loglake.ledger.ranges.batch_watermarks``),
        or as the ledger stood at ``as_of``: from its rows committed by then. Partitions the
        batch layer has not covered from their earliest offset have none."""
        from loglake.kafka.admin import log_bounds
        from loglake.ledger.ranges import batch_watermarks, compute_watermarks, ledger_rows

        if as_of is None:
            return batch_watermarks(self.config, ds)
        rows = [r for r in ledger_rows(self.config, ds) if _utc(r["committed_at"]) <= _utc(as_of)]
        if not rows:
            return {}
        earliest = {p: lo for p, (lo, _hi) in log_bounds(self.config, ds.topic).items()}
        return compute_watermarks(rows, earliest)

    def speed_lag(self, ds: Dataset) -> dict[int, int]:
        """Per partition, the records the speed layer has not processed: log end − its
        consumer group's committed position (− the earliest retained offset where it has
        none yet)."""
        from loglake.kafka.admin import dataset_state

        return {s.partition: s.end - (s.speed_position if s.speed_position is not None else s.earliest)
                for s in dataset_state(self.config, ds)}

    def plan_batch(self, ds: Dataset) -> Plan:
        """Each partition's ``[W_p, log end)`` (``loglake.batch.planning.plan_batch``)."""
        from loglake.batch.planning import plan_batch

        return plan_batch(self.config, ds)

    def plan_backfill(self, ds: Dataset, ranges: Sequence[str] | None = None, from_ts: str | None = None,
                      to_ts: str | None = None) -> Plan:
        """A backfill request checked against the log (``loglake.batch.planning.plan_backfill``)."""
        from loglake.batch.planning import plan_backfill

        return plan_backfill(self.config, ds, ranges=ranges, from_ts=from_ts, to_ts=to_ts)


def _utc(moment: datetime) -> datetime:
    """``moment`` with a time zone: a naive one is UTC (how the ledger stores its times)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
