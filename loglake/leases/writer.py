"""A writer's lease: taken before a dataset's batch-side tables are written, renewed while
the writer runs, checked before each of its commits (``check_lease``), inherited by the jobs
the holder starts (``LOGLAKE_LOCK_TOKEN``, or the shared application's request)."""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from loglake.core.errors import JobCancelled, LeaseLostError, WriterBusyError, describe_holder
from loglake.leases import records
from loglake.leases.records import DatasetLock

TOKEN_ENV = "LOGLAKE_LOCK_TOKEN"
# How long a writer waits for the holder before failing (transient: Airflow retries it).
DEFAULT_WAIT_SECONDS = float(os.environ.get("LOGLAKE_WRITER_WAIT_SECONDS", "900"))
# The lease this thread writes under: the environment is the whole process's, and the shared
# Spark application runs several jobs at once (each in its own thread).
_TOKEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("loglake_lock_token", default=None)


def current_token() -> str | None:
    """The lease this thread (or this process, from its parent) writes under, if any."""
    return _TOKEN.get() or os.environ.get(TOKEN_ENV)


@contextmanager
def writer(config, dataset: str, operation: str, run_id: str | None = None,
           wait_seconds: float | None = None, say=None, inherited: str | None = None,
           export: bool = True, cancel: threading.Event | None = None) -> Iterator[str]:
    """Hold the dataset's lease for the block (waiting up to ``wait_seconds`` for another
    holder); yields the token, also set in ``LOGLAKE_LOCK_TOKEN`` for the jobs it starts
    (unless ``export`` is false: a thread of a process that runs several jobs at once).
    ``cancel`` set while it waits (the job's caller went away): ``JobCancelled`` at once,
    the lease never taken.

    Re-entrant through the token: inside a holder (``inherited``, else this thread's lease,
    else the token in the environment), the block runs under the same lease and leaves it to
    its owner.
    """
    if wait_seconds is None:
        wait_seconds = float(os.environ.get("LOGLAKE_WRITER_WAIT_SECONDS", DEFAULT_WAIT_SECONDS))
    lock = DatasetLock(config, dataset)
    inherited = inherited or _TOKEN.get() or (os.environ.get(TOKEN_ENV) if export else None)
    cancel = cancel or threading.Event()  # never set: its wait is a plain sleep
    started = time.monotonic()
    told = False
    while True:
        if cancel.is_set():
            raise JobCancelled(dataset, "its caller went away while it waited for the dataset's lease")
        token, held, nested = lock.try_acquire(operation, run_id, inherited)
        if token:
            break
        waited = time.monotonic() - started
        if waited >= wait_seconds:
            raise WriterBusyError(dataset, held, waited)
        if not told:
            (say or (lambda m: print(m, file=sys.stderr, flush=True)))(
                f"loglake: {dataset} is being written by {describe_holder(held)}; waiting (up to {wait_seconds:.0f}s)")
            told = True
        cancel.wait(min(1.0, max(0.05, wait_seconds - waited)))
    held = _Held(lock, token, operation, run_id)
    if nested:
        marks = _TOKEN.set(token), _HELD.set(held)
        try:
            yield token  # under a holder (our parent, or this process already): it renews and releases
        finally:
            _HELD.reset(marks[1])
            _TOKEN.reset(marks[0])
        return
    stop = threading.Event()

    def renew() -> None:
        # A renewal the store (or the filesystem) did not answer is tried again every second: the
        # lease is ours until someone has seen it unchanged for its life. One that finds it taken
        # ends the renewals; the holder's next commit refuses to go on (check_lease).
        wait = records.RENEW_SECONDS
        while not stop.wait(wait):
            try:
                if not lock.renew(token):
                    return
                wait = records.RENEW_SECONDS
            except Exception as e:  # noqa: BLE001 — whatever the store answered, the lease may still be ours
                print(f"loglake: {dataset}: could not renew the dataset's lease ({type(e).__name__}: {e}); "
                      "retrying", file=sys.stderr, flush=True)
                wait = min(1.0, records.RENEW_SECONDS)

    thread = threading.Thread(target=renew, name=f"loglake-lease-{dataset}", daemon=True)
    thread.start()
    before = os.environ.get(TOKEN_ENV)
    if export:
        os.environ[TOKEN_ENV] = token
    marks = _TOKEN.set(token), _HELD.set(held)
    try:
        yield token
    finally:
        stop.set()
        _HELD.reset(marks[1])
        _TOKEN.reset(marks[0])
        if export:
            if before is None:
                os.environ.pop(TOKEN_ENV, None)
            else:
                os.environ[TOKEN_ENV] = before
        try:
            lock.release(token)
        except Exception as e:  # noqa: BLE001 — the block's own outcome stands; the lease expires by itself
            print(f"loglake: {dataset}: could not release the dataset's lease ({type(e).__name__}: {e}); it "
                  f"expires by itself in {records.TTL_SECONDS:.0f}s", file=sys.stderr, flush=True)


class _Held:
    """The lease a thread writes under (``writer``'s block, its own or inherited)."""

    def __init__(self, lock: DatasetLock, token: str, operation: str, run_id: str | None):
        self.lock, self.token, self.operation, self.run_id = lock, token, operation, run_id


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("loglake_lease_held", default=None)


def check_lease(what: str) -> None:
    """Before a commit of a writer (``what`` names it): the lease this thread writes under is still
    its own, renewed now by compare-and-swap (so no one can take it for another life from now),
    else ``LeaseLostError`` naming who holds it: the holder that lost its lease commits nothing
    more. A store that does not answer is asked again for up to a lease's life; then the lease
    counts as lost. No lease here (the speed stream, a job that writes no dataset): nothing to check."""
    held = _HELD.get()
    if held is None:
        return
    deadline = time.monotonic() + records.TTL_SECONDS
    while True:
        try:
            if held.lock.renew(held.token):
                return
            taken, _version = held.lock.read()
            raise LeaseLostError(held.lock.dataset, held.operation, held.run_id, what, taken)
        except LeaseLostError:
            raise
        except Exception as e:  # noqa: BLE001 — the store did not answer: ask again while the lease may live
            if time.monotonic() >= deadline:
                raise LeaseLostError(held.lock.dataset, held.operation, held.run_id, what, None,
                                     f"its renewals failed for {records.TTL_SECONDS:.0f}s ({type(e).__name__}: {e})") from e
            time.sleep(min(1.0, records.RENEW_SECONDS))


def holders(config, datasets) -> dict[str, dict]:
    """Dataset → its live lease holder, for ``loglake status`` and the loglake page."""
    out = {}
    for name in datasets:
        try:
            held = DatasetLock(config, name).holder()
        except OSError:
            held = None
        if held:
            out[name] = held
    return out
