"""Retries within one call, for transient errors only (tenacity).

A transient error (``loglake.core.errors.known_transient``) is retried with exponential backoff
and jitter until an attempt or time budget runs out; then the last error is raised as
it was, still transient, so the caller's caller — an Airflow task's own retries — may
try again later. Permanent errors are raised at once.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from tenacity import (
    RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential
)

from loglake.core.errors import known_transient

T = TypeVar("T")
log = logging.getLogger("loglake.retry")


def retry_transient(fn: Callable[[], T], *, what: str = "", attempts: int | None = None, seconds: float | None = None,
                    base_delay: float = 0.5, max_delay: float = 8.0,
                    only: type[BaseException] | tuple[type[BaseException], ...] | None = None,
                    on_retry: Callable[[int, BaseException, float], None] | None = None) -> T:
    """``fn()``, retried while it raises a known transient error (or one of ``only``).

    Stops after ``attempts`` attempts or ``seconds`` seconds (whichever comes first);
    then the last error is raised. ``on_retry(attempt, error, delay)`` is called before
    each wait (default: a log line naming ``what``).
    """
    def retriable(e: BaseException) -> bool:
        return isinstance(e, only) if only is not None else known_transient(e)

    stops = []
    if attempts is not None:
        stops.append(stop_after_attempt(attempts))
    if seconds is not None:
        stops.append(stop_after_delay(seconds))
    stop = stops[0] if len(stops) == 1 else (stops[0] | stops[1]) if stops else stop_after_attempt(5)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception()
        delay = state.next_action.sleep if state.next_action else 0.0
        if on_retry is not None:
            on_retry(state.attempt_number, error, delay)
        else:
            log.info("%s: %s on attempt %d; retrying in %.1fs", what or getattr(fn, "__name__", "call"),
                     type(error).__name__, state.attempt_number, delay)

    retrying = Retrying(retry=retry_if_exception(retriable), stop=stop,
                        wait=wait_random_exponential(multiplier=base_delay, max=max_delay),
                        before_sleep=before_sleep, reraise=True)
    return retrying(fn)


def attempts_made(fn: Callable[[], T], **kwargs) -> tuple[T, int]:
    """``retry_transient(fn, **kwargs)`` and the number of attempts it took."""
    count = [0]

    def counted() -> T:
        count[0] += 1
        return fn()

    return retry_transient(counted, **kwargs), count[0]
