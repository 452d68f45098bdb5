"""Sensors on loglake's own state: the batch watermark advanced, the speed layer caught up.

Each poke reads the state afresh through ``LoglakeHook`` (the offsets ledger with delta-rs,
the log end and the consumer group with confluent-kafka) and keeps nothing between pokes,
so both run in ``reschedule`` mode (their default: the worker slot is free while they
wait). A poke's loglake error ends the sensor as ``loglake_airflow.errors`` says: an
unknown dataset fails it at once, an unavailable broker gets its retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException

from loglake_airflow.errors import loglake_errors
from loglake_airflow.hooks import LoglakeHook


def reached(marks: Mapping[int, int], target: Mapping[int, int]) -> bool:
    """Whether every partition of ``target`` has a watermark at or past its offset (a
    partition without a watermark is at 0)."""
    return all(marks.get(p, 0) >= offset for p, offset in target.items())


def advanced(before: Mapping[int, int], now: Mapping[int, int]) -> bool:
    """Whether some partition's watermark is past where it was ``before`` (a partition that
    had none counts from 0)."""
    return any(w > before.get(p, 0) for p, w in now.items())


def _partitions(target: Mapping[Any, Any]) -> dict[int, int]:
    """``target`` with int partitions and offsets (a rendered template or an XCom gives strings)."""
    return {int(p): int(offset) for p, offset in target.items()}


class BatchWatermarkSensor(BaseSensorOperator):
    """Wait until a dataset's batch watermark reached ``target``, or, without one, advanced
    past where it stood at ``since``.

    Done, the sensor returns the watermarks (partition → W_p, keys as strings) as its XCom.

    :param dataset: the dataset's name (templated)
    :param target: partition → offset that every listed partition's W_p must reach, for
        example the log end offsets a producer task returned (templated)
    :param since: without ``target``: done once some partition's W_p is past the one the
        ledger gave at this moment (a datetime or an ISO-8601 string, templated); default:
        when the DAG run started
    """

    template_fields = ("dataset", "target", "since")

    def __init__(self, *, dataset: str, target: Mapping[Any, Any] | None = None,
                 since: datetime | str | None = None, mode: str = "reschedule", **kwargs: Any) -> None:
        super().__init__(mode=mode, **kwargs)
        self.dataset = dataset
        self.target = target
        self.since = since

    @loglake_errors
    def poke(self, context) -> bool | PokeReturnValue:
        hook = LoglakeHook()
        ds = hook.dataset(self.dataset)
        marks = hook.watermarks(ds)
        if self.target is not None:
            target = _partitions(self.target)
            done = reached(marks, target)
            self.log.info("%s: batch watermark %s; waiting for %s", ds.name, _shown(marks), _shown(target))
        else:
            since = self._since(context)
            before = hook.watermarks(ds, as_of=since)
            done = advanced(before, marks)
            self.log.info("%s: batch watermark %s; at %s it was %s", ds.name, _shown(marks), since.isoformat(),
                          _shown(before))
        return PokeReturnValue(done, {str(p): w for p, w in sorted(marks.items())}) if done else False

    def _since(self, context) -> datetime:
        if isinstance(self.since, datetime):
            return self.since
        if not self.since:
            return context["dag_run"].start_date
        try:
            return datetime.fromisoformat(str(self.since))
        except ValueError:
            raise AirflowFailException(f"since: {self.since!r} is not an ISO-8601 time") from None


class StreamCaughtUpSensor(BaseSensorOperator):
    """Wait until the speed layer of a dataset is at most ``max_lag`` records behind the log
    end, summed over its partitions (log end − the consumer group's committed position).

    Done, the sensor returns the lag per partition (keys as strings) as its XCom.

    :param dataset: the dataset's name (templated)
    :param max_lag: records the speed layer may still have to process (0: caught up)
    """

    template_fields = ("dataset",)

    def __init__(self, *, dataset: str, max_lag: int = 0, mode: str = "reschedule", **kwargs: Any) -> None:
        super().__init__(mode=mode, **kwargs)
        if max_lag < 0:
            raise ValueError(f"max_lag must be 0 or more, not {max_lag}")
        self.dataset = dataset
        self.max_lag = max_lag

    @loglake_errors
    def poke(self, context) -> bool | PokeReturnValue:
        hook = LoglakeHook()
        ds = hook.dataset(self.dataset)
        lag = hook.speed_lag(ds)
        total = sum(lag.values())
        self.log.info("%s: speed lag %d records (%s); at most %d wanted", ds.name, total, _shown(lag), self.max_lag)
        return PokeReturnValue(True, {str(p): n for p, n in sorted(lag.items())}) if total <= self.max_lag else False


def _shown(per_partition: Mapping[int, int]) -> str:
    return ", ".join(f"[{p}] {v}" for p, v in sorted(per_partition.items())) or "none"
