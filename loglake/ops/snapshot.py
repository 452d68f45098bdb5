"""``loglake status --json`` and what the exporter's metrics are made of: one function each.

``read(config, ds)`` is a dataset's state (``loglake.ops.status.dataset_status``, the
object the text ``loglake status`` prints) and the totals of its time series
(``loglake.observe.series``); ``dataset`` makes them one dictionary; ``platform`` adds every process. The exporter turns exactly
these dictionaries into metrics (``loglake.observe.exporter``, from its last sample), so a
scrape and ``status --json`` of the same state say the same numbers.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import Callable, TypeVar

from confluent_kafka import KafkaException

from loglake.core.config import Config, Dataset
from loglake.core.errors import LoglakeError
from loglake.core.retrying import retry_transient
from loglake.kafka.admin import list_topics
from loglake.observe import series
from loglake.ops.status import DatasetStatus, dataset_status

T = TypeVar("T")


def read(config: Config, ds: Dataset, now: float | None = None, timeout: float = 15.0) -> tuple[DatasetStatus, dict]:
    """``ds``'s status (``loglake.ops.status.dataset_status``) and its series' ``totals``; Kafka's
    "not yet" answers right after a broker start are retried for ``timeout`` seconds."""
    st = retry_transient(lambda: dataset_status(config, ds, now), what=f"status of {ds.name}", seconds=timeout)
    return st, series.totals(series.events(config, ds.name))


def dataset(config: Config, ds: Dataset, now: float | None = None) -> dict:
    """``read`` as one dictionary: ``DatasetStatus.to_dict`` with the ``totals``."""
    st, totals = read(config, ds, now)
    return {**st.to_dict(), "totals": totals}


def datasets(config: Config, kafka_up: bool = True, read: Callable[[Config, Dataset], T] | None = None,
             ) -> tuple[dict[str, T], dict[str, str]]:
    """Every dataset's ``dataset`` (or ``read(config, ds)``: the text ``loglake status``'s
    lines), and why each of the others could not be read (Kafka does not run or answer, or its
    topic does not exist yet: said at once, not retried)."""
    read = read or dataset
    out, errors = {}, {}
    try:
        topics = list_topics(config) if kafka_up else {}
    except (LoglakeError, KafkaException) as e:
        return {}, {ds.name: str(e) for ds in config.datasets.values()}
    for ds in config.datasets.values():
        if not kafka_up:
            errors[ds.name] = "kafka is not running"
        elif ds.topic not in topics:
            errors[ds.name] = f"topic {ds.topic} does not exist yet"
        else:
            try:
                out[ds.name] = read(config, ds)
            except (LoglakeError, KafkaException) as e:
                errors[ds.name] = str(e)
    return out, errors


def platform(config: Config, processes, kafka_up: bool) -> dict:
    """The whole of ``loglake status --json``: the time, the metrics URL, every process
    (``loglake.local.stack.processes``), every dataset, and the datasets that could not be read."""
    from loglake.observe import exporter

    found, errors = datasets(config, kafka_up)
    # A deployment's exporter is one of its services: its address here would be this host's.
    local = exporter.serves(config) and not config.profile.deployment.elsewhere
    return {"at": datetime.now(timezone.utc).isoformat(), "metrics": exporter.url(config) if local else None,
            "processes": [asdict(p) for p in processes], "datasets": found, "errors": errors}
