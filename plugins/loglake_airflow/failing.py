"""How a loglake error ends an Airflow task: permanent ones at once, transient ones retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk.exceptions import AirflowFailException


def or_fail(fn: Callable, *args, **kwargs) -> Any:
    """Call ``fn``; a permanent loglake error (bad input, data loss, ...) fails the task
    without retrying, a transient one (the broker is unavailable, ...) goes up as it is and
    gets the retries the task declares."""
    from loglake.core.errors import LoglakeError

    try:
        return fn(*args, **kwargs)
    except LoglakeError as e:
        if e.transient:
            raise
        raise AirflowFailException(str(e)) from e
