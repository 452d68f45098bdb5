"""How a loglake error ends an Airflow task: permanent ones at once, transient ones retried.

The one place that maps loglake's error vocabulary (``loglake.core.errors``) onto Airflow's.
Every loglake error says whether another attempt may help (``is_transient``):

- **permanent** (bad input, data loss, a failed quality gate, a refused login):
  ``AirflowFailException`` with the error's own message — the task fails without retries,
  since another attempt would give the same answer;
- **transient** (the broker unavailable, a coordinator loading, another writer holding
  the dataset): ``AirflowException`` naming the error's type — the task gets the retries
  its DAG declares.

A Kafka client's own exception is judged the same way (librdkafka's ``retriable``). Any
other exception (a crash, an ``OSError``) goes up as it is and gets the retries too:
Airflow's default for what nobody classified. A Spark job reports its failure in its
summary instead of raising (``loglake.jobs.protocol``): ``summary_error`` maps that form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowException, AirflowFailException

F = TypeVar("F", bound=Callable[..., Any])


def airflow_error(error: BaseException) -> AirflowException | None:
    """The Airflow exception a task that met ``error`` ends with; None when loglake does not
    know ``error`` (it then goes up unchanged)."""
    # Deferred: loglake (and confluent-kafka through it) is loaded when a task runs, never
    # when a DAG file that imports this module is parsed.
    from confluent_kafka import KafkaException
    from loglake.core.errors import LoglakeError, is_transient

    if not isinstance(error, (LoglakeError, KafkaException)):
        return None
    if is_transient(error):
        return AirflowException(f"{type(error).__name__}: {error}")
    # loglake's own messages name what was wrong and what to do: shown as they are.
    return AirflowFailException(str(error) if isinstance(error, LoglakeError) else f"{type(error).__name__}: {error}")


def loglake_errors(fn: F) -> F:
    """Decorate a task body, an operator's ``execute`` or a sensor's ``poke``: loglake errors
    raised inside end the task as ``airflow_error`` says."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            mapped = airflow_error(e)
            if mapped is None:
                raise
            raise mapped from e

    return run  # type: ignore[return-value]


def summary_error(summary: Mapping[str, Any]) -> AirflowException:
    """The exception of a Spark job that failed with ``summary`` (``{"error", "error_type",
    "transient"}``): ``AirflowFailException`` only when the job said its error is permanent;
    one that died without saying (a crash, an OOM) is worth another attempt."""
    said = f"{summary.get('error_type')}: {summary.get('error')}"
    if summary.get("transient") is False:
        return AirflowFailException(said)
    return AirflowException(said)
