"""One writer per dataset: a lease that batch runs, backfills, maintenance and loglake's
commands take before they write a dataset's tables, so they take turns instead of
failing each other's Delta commits.

The lease is a small JSON record per dataset (``Where the leases live`` below): holder
(operation, run id), host, pid, token, when it was taken and until when it holds. It is only
ever changed by compare-and-swap, so taking, renewing, breaking and releasing are atomic
for every writer that sees the record. The holder renews the lease from a thread every
few seconds; a holder that crashed stops renewing and its lease is broken once expired —
at once when it ran on this host and its pid is gone. A crashed holder never blocks for
ever. A job started by a holder (``loglake batch`` runs the batch and quality jobs) gets
the holder's token in ``LOGLAKE_LOCK_TOKEN`` and writes under the same lease; a job the
shared Spark application runs for a holder gets it with the request (``inherited``), and
the lease of each job thread stays its own (``_TOKEN``, a context variable).

The speed stream is not a holder: it appends while the others run. Delta lets a commit
that only adds files (the stream's appends, an OPTIMIZE) land beside any other; but the
tables are not partitioned and Delta's isolation is Serializable, so a commit that *read*
a table — a DELETE, a ``replaceWhere`` overwrite — fails (``ConcurrentAppendException``)
whenever an append landed while it ran, whatever rows either touched; under a stream that
appends every second, every retry fails the same way. So a holder about to make such a
commit on a table the stream appends to (maintenance's expiry, a re-run's quarantine
rows) pauses the stream's appends for that commit (``appends_paused``): the stream holds
its next micro-batch (``wait_while_paused``) until the request is gone, expired, or its
holder died. A batch the stream had already begun still lands; the commit it fails is
retried, and by then the stream waits.

Where the leases live: beside the tables. On a filesystem (one machine, or a mount every writer
shares) each record is changed under an ``flock``; on an object store (an ``s3a://`` lake) by
compare-and-swap on the store itself (``If-None-Match``/``If-Match``, ``loglake.core.objectstore``):
the store arbitrates, so writers on different hosts need no shared filesystem and no lock service.
The same conditional writes make every Delta commit safe (``S3ConditionalLogStore``, delta-rs).
"""

from __future__ import annotations

import contextvars
import fcntl
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import psutil

from loglake.core import objectstore
from loglake.core.errors import JobCancelled, StreamRunningError, WriterBusyError, describe_holder

TOKEN_ENV = "LOGLAKE_LOCK_TOKEN"
TTL_SECONDS = 60.0
RENEW_SECONDS = 10.0
# How long a writer waits for the holder before failing (transient: Airflow retries it).
DEFAULT_WAIT_SECONDS = float(os.environ.get("LOGLAKE_WRITER_WAIT_SECONDS", "900"))
# The lease this thread writes under: the environment is the whole process's, and the shared
# Spark application runs several jobs at once (each in its own thread).
_TOKEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("loglake_lock_token", default=None)


def lock_dir(config) -> Path:
    """``lake.locks`` as a directory (a filesystem lake's leases)."""
    return Path(config.lock_root)


def _created(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _running(pid: int, created: float | None) -> bool:
    """Process ``pid`` runs, and is the same process (same start time: pids are reused)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and (created is None or proc.create_time() == created)
    except psutil.Error:
        return False


def _now() -> float:
    return time.time()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _FileSlot:
    """A lease record in a file, changed by compare-and-swap under an ``flock`` of a guard file
    beside it (one machine, or a filesystem every writer mounts)."""

    def __init__(self, directory: Path, name: str):
        self.dir = directory
        self.path = directory / f"{name}.json"
        self.guard = directory / f"{name}.guard"

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.guard, "a") as g:
            fcntl.flock(g, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(g, fcntl.LOCK_UN)

    def _text(self) -> str | None:
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return None

    def read(self) -> tuple[dict | None, str | None]:
        """(the record, its version: the text itself), or (None, None)."""
        with self._guarded():
            text = self._text()
        return _parse(text), text

    def _write(self, value: dict | None) -> None:
        if value is None:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(value))
            tmp.replace(self.path)

    def swap(self, value: dict | None, version: str | None) -> bool:
        """Replace the record read as ``version`` by ``value`` (None: remove it); False when it changed since."""
        with self._guarded():
            if self._text() != version:
                return False
            self._write(value)
            return True

    def put(self, value: dict | None) -> None:
        """Write ``value`` (None: remove the record), whatever was there."""
        with self._guarded():
            self._write(value)


class _ObjectSlot:
    """A lease record as an object on the lake's store, changed by compare-and-swap: created with
    ``If-None-Match: *``, replaced with ``If-Match: <etag>`` (the store arbitrates; no host's lock)."""

    def __init__(self, root: str, name: str):
        self.uri = f"{root.rstrip('/')}/{name}.json"

    def read(self) -> tuple[dict | None, str | None]:
        """(the record, its ETag), or (None, None)."""
        return objectstore.get_json(self.uri)

    def swap(self, value: dict | None, version: str | None) -> bool:
        """As ``_FileSlot.swap``. A lease is freed by a record with no holder (a conditional
        delete is not in every store's API)."""
        return objectstore.put_json(self.uri, value or {"released_at": _iso(_now())}, version) is not None

    def put(self, value: dict | None) -> None:
        if value is None:
            objectstore.delete(self.uri)
        else:
            objectstore.write_json(self.uri, value)


def _parse(text: str | None) -> dict | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _slot(config, name: str) -> _FileSlot | _ObjectSlot:
    root = config.lock_root
    return _ObjectSlot(root, name) if objectstore.is_remote(root) else _FileSlot(Path(root), name)


def _backoff() -> None:
    """A short random pause after a lost compare-and-swap, so racing writers (or a store that
    answers every conditional write with a conflict) do not spin."""
    time.sleep(random.uniform(0.01, 0.1))


class DatasetLock:
    """The lease of one dataset (``kind`` "writer"), or of its speed stream on an object-store lake
    (``kind`` "stream")."""

    def __init__(self, config, dataset: str, kind: str = "writer"):
        self.dataset = dataset
        self.slot = _slot(config, dataset if kind == "writer" else f"{dataset}.{kind}")

    @property
    def path(self) -> Path:  # a filesystem lease's file
        return self.slot.path

    @property
    def dir(self) -> Path:
        return self.slot.dir

    @staticmethod
    def stale(holder: dict, now: float | None = None) -> bool:
        """Expired, or held by a process of this host that is gone."""
        if (now or _now()) > holder.get("expires", 0):
            return True
        if holder.get("host") == socket.gethostname():
            return not _running(int(holder.get("pid", 0)), holder.get("created"))
        return False

    def _read(self) -> tuple[dict | None, str | None]:
        """(the holder's record, or None when free or released; its version)."""
        held, version = self.slot.read()
        return (held if held and held.get("token") else None), version

    def holder(self) -> dict | None:
        """The live holder, or None (a stale lease counts as free)."""
        held, _version = self._read()
        return None if held is None or self.stale(held) else held

    def try_acquire(self, operation: str, run_id: str | None = None,
                    token: str | None = None) -> tuple[str | None, dict | None, bool]:
        """(token, None, nested): taken, or already held under ``token`` (nested: by a parent);
        (None, holder, False): someone else holds it."""
        while True:
            held, version = self._read()
            if held is not None and not self.stale(held):
                if token and held.get("token") == token:
                    return token, None, True
                return None, held, False
            mine = uuid.uuid4().hex
            now = _now()
            if self.slot.swap({"dataset": self.dataset, "operation": operation, "run_id": run_id, "token": mine,
                               "host": socket.gethostname(), "pid": os.getpid(), "created": _created(os.getpid()),
                               "acquired_at": _iso(now),
                               "expires": now + TTL_SECONDS, "expires_at": _iso(now + TTL_SECONDS)}, version):
                return mine, None, False
            _backoff()  # another writer changed it between our read and our write: read again

    def renew(self, token: str) -> bool:
        """Extend the lease held under ``token``; False when it is no longer ours (taken after it expired)."""
        while True:
            held, version = self._read()
            if held is None or held.get("token") != token:
                return False
            now = _now()
            held.update(expires=now + TTL_SECONDS, expires_at=_iso(now + TTL_SECONDS))
            if self.slot.swap(held, version):
                return True
            _backoff()

    def release(self, token: str) -> None:
        while True:
            held, version = self._read()
            if held is None or held.get("token") != token or self.slot.swap(None, version):
                return
            _backoff()


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
    if nested:
        mark = _TOKEN.set(token)
        try:
            yield token  # under a holder (our parent, or this process already): it renews and releases
        finally:
            _TOKEN.reset(mark)
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_SECONDS):
            if not lock.renew(token):
                return

    thread = threading.Thread(target=renew, name=f"loglake-lease-{dataset}", daemon=True)
    thread.start()
    before = os.environ.get(TOKEN_ENV)
    if export:
        os.environ[TOKEN_ENV] = token
    mark = _TOKEN.set(token)
    try:
        yield token
    finally:
        stop.set()
        _TOKEN.reset(mark)
        if export:
            if before is None:
                os.environ.pop(TOKEN_ENV, None)
            else:
                os.environ[TOKEN_ENV] = before
        lock.release(token)


# A stream appends without Delta's transaction check only while its lease is surely its own:
# renewed less than TTL - SURE_MARGIN ago (an object-store lease; see StreamLease).
SURE_MARGIN_SECONDS = 30.0


class StreamLease:
    """What a speed stream knows of its lease while it runs.

    On a filesystem the kernel holds the ``flock`` for the process, however it ends: always
    ``sure``. On an object store the lease is a record the stream renews (every
    ``RENEW_SECONDS``, for ``TTL_SECONDS``); another stream takes it only once it expired. So
    ``sure()`` holds while the last renewal is recent enough that the lease cannot have expired
    during the commit about to be made; otherwise the stream asks Delta to check its
    transaction id (``spark_jobs.streaming.process_batch``): a micro-batch another stream
    also wrote is then skipped, not appended twice. A renewal that finds the lease taken
    (this stream was cut off longer than its life) stops the stream: ``StreamRunningError``."""

    def __init__(self, dataset: str, renewing: bool = False):
        self.dataset = dataset
        self.renewing = renewing
        self.renewed = time.monotonic()
        self.lost: str | None = None

    def sure(self) -> bool:
        if self.lost is not None:
            raise StreamRunningError(self.dataset, self.lost)
        return not self.renewing or time.monotonic() - self.renewed < TTL_SECONDS - SURE_MARGIN_SECONDS


@contextmanager
def stream_lease(config, dataset: str) -> Iterator[StreamLease]:
    """Hold the dataset's speed-stream lease for the block, or ``StreamRunningError`` at once:
    one stream per dataset (its micro-batches after the first are appended without Delta's
    transaction check, ``spark_jobs.streaming.process_batch``). On a filesystem, an ``flock`` on
    a file of ``lake.locks``: the kernel lets go when the holder's process ends, however it ends.
    On an object store, a renewed lease record (``StreamLease``)."""
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
        f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {_iso(_now())}")
        f.flush()
        try:
            yield StreamLease(dataset)
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _stream_lease_on_store(config, dataset: str) -> Iterator[StreamLease]:
    lock = DatasetLock(config, dataset, "stream")
    token, held, _nested = lock.try_acquire("speed stream")
    if token is None:
        raise StreamRunningError(dataset, describe_holder(held))
    lease = StreamLease(dataset, renewing=True)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_SECONDS):
            asked = time.monotonic()
            try:
                ours = lock.renew(token)
            except Exception as e:  # the store unreachable: not sure any more once the margin is gone
                print(f"loglake: speed {dataset}: could not renew the stream's lease ({e}); retrying",
                      file=sys.stderr, flush=True)
                continue
            if not ours:
                taken = lock.holder()
                lease.lost = describe_holder(taken) if taken else "its lease expired and was taken"
                return
            lease.renewed = asked

    thread = threading.Thread(target=renew, name=f"loglake-stream-lease-{dataset}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join(timeout=RENEW_SECONDS)
        lock.release(token)


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


# A pause request outlives no holder: its pid is checked (this host), and it expires anyway.
PAUSE_TTL_SECONDS = 900.0


def _pause_slot(config, dataset: str) -> _FileSlot | _ObjectSlot:
    return _slot(config, f"{dataset}.pause-appends")


@contextmanager
def appends_paused(config, dataset: str, what: str, ttl: float = PAUSE_TTL_SECONDS) -> Iterator[None]:
    """Ask the speed stream of ``dataset`` to hold its appends while the block runs (see the
    module's docstring). Only the dataset's writer (the lease holder) asks."""
    slot = _pause_slot(config, dataset)
    now = _now()
    slot.put({"dataset": dataset, "what": what, "host": socket.gethostname(), "pid": os.getpid(),
              "created": _created(os.getpid()), "since": _iso(now), "expires": now + ttl,
              "expires_at": _iso(now + ttl)})
    try:
        yield
    finally:
        slot.put(None)


def appends_pause(config, dataset: str) -> dict | None:
    """The live request to pause the stream's appends of ``dataset`` (None: none, or stale)."""
    request, _version = _pause_slot(config, dataset).read()
    return None if request is None or DatasetLock.stale(request) else request


def wait_while_paused(config, dataset: str, poll: float = 0.2) -> tuple[float, dict | None]:
    """Block while the stream's appends of ``dataset`` are paused: (seconds waited, the request
    waited for). Bounded: a request expires, and one whose holder died counts as gone."""
    first = appends_pause(config, dataset)
    if first is None:
        return 0.0, None
    started = time.monotonic()
    while appends_pause(config, dataset) is not None:
        time.sleep(poll)
    return time.monotonic() - started, first
