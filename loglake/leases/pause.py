"""A writer's request that the speed stream hold its appends while it makes a commit that
reads a table the stream appends to (a DELETE, a ``replaceWhere``): the package's docstring
says why."""

from __future__ import annotations

import os
import socket
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

from loglake.leases.records import HOST, FileSlot, ObjectSlot, gone, iso, process_start, slot, wall_clock

# A pause request outlives no holder: one whose process is gone (``gone``) counts as none, and a
# stream waits for one at most its ``ttl``, measured on the stream's own clock.
PAUSE_TTL_SECONDS = 900.0


def _pause_slot(config, dataset: str) -> FileSlot | ObjectSlot:
    return slot(config, f"{dataset}.pause-appends")


@contextmanager
def appends_paused(config, dataset: str, what: str, ttl: float = PAUSE_TTL_SECONDS) -> Iterator[None]:
    """Ask the speed stream of ``dataset`` to hold its appends while the block runs (see the
    module's docstring). Only the dataset's writer (the lease holder) asks."""
    slot = _pause_slot(config, dataset)
    now = wall_clock()
    slot.put({"dataset": dataset, "what": what, "id": uuid.uuid4().hex, "host": socket.gethostname(),
              "where": HOST, "pid": os.getpid(), "created": process_start(os.getpid()), "since": iso(now), "ttl": ttl})
    try:
        yield
    finally:
        slot.put(None)


def appends_pause(config, dataset: str) -> dict | None:
    """The request to pause the stream's appends of ``dataset`` (None: none, or its process is gone)."""
    request, _version = _pause_slot(config, dataset).read()
    return None if request is None or gone(request) else request


def wait_while_paused(config, dataset: str, poll: float = 0.2) -> tuple[float, dict | None]:
    """Block while the stream's appends of ``dataset`` are paused: (seconds waited, the request
    waited for). Bounded: a request is waited for at most its ``ttl`` from when this stream first
    saw it (its own clock: the asker's is not read), and one whose holder died counts as gone."""
    first = appends_pause(config, dataset)
    if first is None:
        return 0.0, None
    started = seen = time.monotonic()
    current = first
    while current is not None and time.monotonic() - seen < float(current.get("ttl", PAUSE_TTL_SECONDS)):
        time.sleep(poll)
        request = appends_pause(config, dataset)
        if request is not None and request.get("id") != current.get("id"):
            seen = time.monotonic()  # another request since: its own life counts from now
        current = request
    return time.monotonic() - started, first
