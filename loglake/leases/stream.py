"""The speed stream's lease: one stream per dataset (an ``flock`` on a filesystem, a renewed
record on an object store, where Delta's transaction id is the fence: ``StreamLease``)."""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from loglake.core import objectstore
from loglake.core.errors import StreamRunningError, describe_holder
from loglake.leases import records
from loglake.leases.records import DatasetLock, iso, lock_dir, wall_clock


class StreamLease:
    """What a speed stream knows of its lease while it runs.

    On a filesystem the kernel holds the ``flock`` for the process, however it ends and however
    long it pauses: no second stream of the dataset can run on this machine meanwhile, so the
    stream's micro-batches after its query's first need no transaction check (``checked``
    false). On an object store the lease is a record the stream renews, which another stream
    takes once it saw it unchanged for its life: a stream paused past that (a stopped process, a
    long garbage collection) resumes while another writes. So there every commit of every
    micro-batch carries its (stream id, batch id) as Delta's transaction id and is checked
    (``checked``), which makes a micro-batch's commit a compare-and-swap on the table: of two
    streams committing the same micro-batch, one lands and the other is skipped or fails its
    commit (``loglake.speed.stream``). ``check()`` renews the lease by compare-and-swap before a
    micro-batch commits, and stops a stream whose lease was taken (``StreamRunningError``): not
    the fence, but the stale stream stops instead of trying."""

    def __init__(self, dataset: str, lock: DatasetLock | None = None, token: str | None = None):
        self.dataset = dataset
        self.lock, self.token = lock, token
        self.checked = lock is not None
        self.lost: str | None = None

    def check(self) -> None:
        if self.lock is not None and self.lost is None:
            try:
                ours = self.lock.renew(self.token)
            except Exception as e:  # noqa: BLE001 — the store did not answer: the checked commit decides
                print(f"loglake: speed {self.dataset}: could not renew the stream's lease ({type(e).__name__}: "
                      f"{e}); the micro-batch's commits are checked by Delta", file=sys.stderr, flush=True)
                return
            if not ours:
                self._lose()
        if self.lost is not None:
            raise StreamRunningError(self.dataset, self.lost)

    def _lose(self) -> None:
        taken = self.lock.holder()
        self.lost = describe_holder(taken) if taken else "its lease expired and was taken"


@contextmanager
def stream_lease(config, dataset: str) -> Iterator[StreamLease]:
    """Hold the dataset's speed-stream lease for the block, or ``StreamRunningError``: one
    stream per dataset. On a filesystem, an ``flock`` on a file of ``lake.locks``: the kernel lets
    go when the holder's process ends, however it ends. On an object store, a renewed lease
    record (``StreamLease``; a record another stream still renews is refused within a renewal's
    time, one no one renews is taken after a lease's life)."""
    if objectstore.is_remote(config.lock_root):
        with _stream_lease_on_store(config, dataset) as lease:
            yield lease
        return
    directory = lock_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dataset}.stream"
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise StreamRunningError(dataset, f.read().strip()) from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {iso(wall_clock())}")
        f.flush()
        try:
            yield StreamLease(dataset)
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def _take_stream_lease(lock: DatasetLock, dataset: str) -> str:
    """Take the stream lease of ``dataset``: at once when free; a holder that renews meanwhile
    (its record changes) is alive: ``StreamRunningError`` then; one whose record stays the same
    for its life is gone, and its lease is taken."""
    first = None
    told = False
    while True:
        token, held, _nested = lock.try_acquire("speed stream")
        if token is not None:
            return token
        version = lock.seen_version
        if first is None:
            first = version
        elif version != first:
            raise StreamRunningError(dataset, describe_holder(held))  # it renewed: it runs
        if not told:
            print(f"loglake: speed {dataset}: the stream's lease is held by {describe_holder(held)}; watching it "
                  f"for up to {float(held.get('ttl', records.TTL_SECONDS)):.0f}s: taken if no one renews it meanwhile",
                  file=sys.stderr, flush=True)
            told = True
        time.sleep(min(0.5, records.RENEW_SECONDS / 4))


@contextmanager
def _stream_lease_on_store(config, dataset: str) -> Iterator[StreamLease]:
    lock = DatasetLock(config, dataset, "stream")
    token = _take_stream_lease(lock, dataset)
    lease = StreamLease(dataset, lock, token)
    stop = threading.Event()

    def renew() -> None:
        wait = records.RENEW_SECONDS
        while not stop.wait(wait):
            try:
                ours = lock.renew(token)
            except Exception as e:  # noqa: BLE001 — the store unreachable: tried again; the commits are checked
                print(f"loglake: speed {dataset}: could not renew the stream's lease ({e}); retrying",
                      file=sys.stderr, flush=True)
                wait = min(1.0, records.RENEW_SECONDS)
                continue
            if not ours:
                lease._lose()
                return
            wait = records.RENEW_SECONDS

    thread = threading.Thread(target=renew, name=f"loglake-stream-lease-{dataset}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join(timeout=records.RENEW_SECONDS)
        try:
            lock.release(token)
        except Exception as e:  # noqa: BLE001 — the stream's own outcome stands; the lease expires by itself
            print(f"loglake: speed {dataset}: could not release the stream's lease ({e}); it expires by itself",
                  file=sys.stderr, flush=True)
