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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk.exceptions import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from loglake.core.errors import JobFailure

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


def summary_error(failure: JobFailure) -> AirflowException:
    """The exception of a Spark job that reported ``failure``: ``AirflowFailException`` only
    when the job said its error is permanent."""
    if not failure.transient:
        return AirflowFailException(str(failure))
    return AirflowException(str(failure))
