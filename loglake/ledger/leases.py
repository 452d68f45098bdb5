"""One writer per dataset: a lease that batch runs, backfills, maintenance and loglake's
commands take before they write a dataset's tables, so they take turns instead of
failing each other's Delta commits.

The lease is a small JSON record per dataset (``Where the leases live`` below): holder
(operation, run id), host, pid, token, when it was taken, its life (``ttl``) and a renewal
count. It is only ever changed by compare-and-swap, so taking, renewing, breaking and
releasing are atomic for every writer that sees the record. The holder renews the lease from
a thread every ``RENEW_SECONDS`` (a renewal that fails is tried again while the lease lives);
a holder that crashed stops renewing and its lease is broken once expired. A crashed holder
never blocks for ever.

Expiry reads no clock of the holder's: a taker breaks a lease once it has seen the same record
(the same version: every renewal changes it) for the lease's ``ttl`` on its *own* monotonic clock.
Hosts whose clocks disagree by minutes agree on that, and a holder paused past its life finds its
record replaced when it comes back: its renewal (a compare-and-swap on the version it read) fails.
A holder is dead at once only when it ran in this pid namespace of this boot (``_HOST``: compose
gives every replica of a service one host name, but each its own pid namespace) and its pid is gone.

A lease decides who should write; it is not a fence (a process can pause right after checking
it). So each commit is checked too: a writer's commits call ``check_lease`` first, which renews
the lease by compare-and-swap and fails with ``LeaseLostError`` (transient, naming the new holder)
when another took it; what a check cannot close — a pause between the check and the commit — the
batch side's commits survive by what they are: each replaces exactly its offset range with rows
recomputed from the log (the same rows whoever writes them) or records a range once per run. The
speed stream's fence on an object store is Delta's transaction id (``StreamLease``).

A job started by a holder (``loglake batch`` runs the batch and quality jobs) gets
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
The same conditional writes make every Delta commit safe (``S3ConditionalLogStore``, delta-rs), and
every file of a speed checkpoint on the store (``S3ConditionalCheckpointFileManager``).
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
from loglake.core.errors import JobCancelled, LeaseLostError, StreamRunningError, WriterBusyError, describe_holder

TOKEN_ENV = "LOGLAKE_LOCK_TOKEN"
# A lease's life, measured by whoever would take it on its own clock; renewed six times in it.
# LOGLAKE_LEASE_TTL_SECONDS shortens it (the fault tests pause a holder past its life in seconds).
TTL_SECONDS = float(os.environ.get("LOGLAKE_LEASE_TTL_SECONDS", "60"))
RENEW_SECONDS = TTL_SECONDS / 6
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


def _host_identity() -> str | None:
    """Where this process's pids mean something: the kernel's boot id and this process's pid
    namespace. Processes with the same identity see each other's pids; a compose stack's
    replicas share a host name and a boot id, but each has a pid namespace of its own.
    None where either is unknown: no holder is then judged by its pid."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


_HOST = _host_identity()


def _gone(record: dict) -> bool:
    """The process that wrote ``record`` ran where this one runs (``_HOST``) and is gone."""
    return _HOST is not None and record.get("where") == _HOST and \
        not _running(int(record.get("pid", 0)), record.get("created"))


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
        return objectstore.get_json(self.uri, _answer_within())

    def swap(self, value: dict | None, version: str | None) -> bool:
        """As ``_FileSlot.swap``. A lease is freed by a record with no holder (a conditional
        delete is not in every store's API)."""
        return objectstore.put_json(self.uri, value or {"released_at": _iso(_now())}, version,
                                    _answer_within()) is not None

    def put(self, value: dict | None) -> None:
        if value is None:
            objectstore.delete(self.uri)
        else:
            objectstore.write_json(self.uri, value)


def _answer_within() -> float:
    """How long one request about a lease may take: a renewal's interval (at least a second). A
    renewal not answered by then is made again (``writer``), not left to the SDK's backoff, which
    could outlast the lease."""
    return max(1.0, RENEW_SECONDS)


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
        self._seen: tuple[str | None, float] | None = None  # (a holder's version, when first seen: monotonic)

    @property
    def path(self) -> Path:  # a filesystem lease's file
        return self.slot.path

    @property
    def dir(self) -> Path:
        return self.slot.dir

    def expired(self, held: dict, version: str | None) -> bool:
        """Whether the lease in ``held`` (read as ``version``) may be broken: this lock has seen
        that same version for the lease's ``ttl`` on this process's monotonic clock (a renewal
        changes the version and starts the count again), or its holder ran where this process
        runs and is gone. The holder's clock is never read: hosts whose clocks disagree agree
        on this."""
        if _gone(held):
            return True
        now = time.monotonic()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)
            return False
        return now - self._seen[1] >= float(held.get("ttl", TTL_SECONDS))

    def _read(self) -> tuple[dict | None, str | None]:
        """(the holder's record, or None when free or released; its version)."""
        held, version = self.slot.read()
        return (held if held and held.get("token") else None), version

    def holder(self) -> dict | None:
        """The holder, or None: free, released, or held by a process of this host that is gone.
        (Whether a holder elsewhere still renews takes a lease's life to see: until someone
        takes it, it is shown.)"""
        held, _version = self._read()
        return None if held is None or _gone(held) else held

    def try_acquire(self, operation: str, run_id: str | None = None,
                    token: str | None = None) -> tuple[str | None, dict | None, bool]:
        """(token, None, nested): taken, or already held under ``token`` (nested: by a parent);
        (None, holder, False): someone else holds it (``expired`` not yet: call again with the
        same lock to go on watching it)."""
        while True:
            held, version = self._read()
            if held is not None and token and held.get("token") == token:
                return token, None, True
            if held is not None and not self.expired(held, version):
                return None, held, False
            mine = uuid.uuid4().hex
            now = _now()
            if self.slot.swap({"dataset": self.dataset, "operation": operation, "run_id": run_id, "token": mine,
                               "host": socket.gethostname(), "where": _HOST, "pid": os.getpid(),
                               "created": _created(os.getpid()), "acquired_at": _iso(now), "ttl": TTL_SECONDS,
                               "renewals": 0, "expires": now + TTL_SECONDS, "expires_at": _iso(now + TTL_SECONDS)},
                              version):
                self._seen = None
                return mine, None, False
            _backoff()  # another writer changed it between our read and our write: read again

    def renew(self, token: str) -> bool:
        """Extend the lease held under ``token`` (a new version: whoever watches it counts its life
        again); False when it is no longer ours (taken once expired, or released)."""
        while True:
            held, version = self._read()
            if held is None or held.get("token") != token:
                return False
            now = _now()
            # ``expires`` is the holder's own clock, for people reading the record; no taker reads it.
            held.update(renewals=int(held.get("renewals", 0)) + 1, ttl=TTL_SECONDS, expires=now + TTL_SECONDS,
                        expires_at=_iso(now + TTL_SECONDS))
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
        wait = RENEW_SECONDS
        while not stop.wait(wait):
            try:
                if not lock.renew(token):
                    return
                wait = RENEW_SECONDS
            except Exception as e:  # noqa: BLE001 — whatever the store answered, the lease may still be ours
                print(f"loglake: {dataset}: could not renew the dataset's lease ({type(e).__name__}: {e}); "
                      "retrying", file=sys.stderr, flush=True)
                wait = min(1.0, RENEW_SECONDS)

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
                  f"expires by itself in {TTL_SECONDS:.0f}s", file=sys.stderr, flush=True)


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
    deadline = time.monotonic() + TTL_SECONDS
    while True:
        try:
            if held.lock.renew(held.token):
                return
            taken, _version = held.lock._read()
            raise LeaseLostError(held.lock.dataset, held.operation, held.run_id, what, taken)
        except LeaseLostError:
            raise
        except Exception as e:  # noqa: BLE001 — the store did not answer: ask again while the lease may live
            if time.monotonic() >= deadline:
                raise LeaseLostError(held.lock.dataset, held.operation, held.run_id, what, None,
                                     f"its renewals failed for {TTL_SECONDS:.0f}s ({type(e).__name__}: {e})") from e
            time.sleep(min(1.0, RENEW_SECONDS))


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
        f.write(f"pid {os.getpid()} on {socket.gethostname()}, since {_iso(_now())}")
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
        version = lock._seen[0] if lock._seen else None
        if first is None:
            first = version
        elif version != first:
            raise StreamRunningError(dataset, describe_holder(held))  # it renewed: it runs
        if not told:
            print(f"loglake: speed {dataset}: the stream's lease is held by {describe_holder(held)}; watching it "
                  f"for up to {float(held.get('ttl', TTL_SECONDS)):.0f}s: taken if no one renews it meanwhile",
                  file=sys.stderr, flush=True)
            told = True
        time.sleep(min(0.5, RENEW_SECONDS / 4))


@contextmanager
def _stream_lease_on_store(config, dataset: str) -> Iterator[StreamLease]:
    lock = DatasetLock(config, dataset, "stream")
    token = _take_stream_lease(lock, dataset)
    lease = StreamLease(dataset, lock, token)
    stop = threading.Event()

    def renew() -> None:
        wait = RENEW_SECONDS
        while not stop.wait(wait):
            try:
                ours = lock.renew(token)
            except Exception as e:  # noqa: BLE001 — the store unreachable: tried again; the commits are checked
                print(f"loglake: speed {dataset}: could not renew the stream's lease ({e}); retrying",
                      file=sys.stderr, flush=True)
                wait = min(1.0, RENEW_SECONDS)
                continue
            if not ours:
                lease._lose()
                return
            wait = RENEW_SECONDS

    thread = threading.Thread(target=renew, name=f"loglake-stream-lease-{dataset}", daemon=True)
    thread.start()
    try:
        yield lease
    finally:
        stop.set()
        thread.join(timeout=RENEW_SECONDS)
        try:
            lock.release(token)
        except Exception as e:  # noqa: BLE001 — the stream's own outcome stands; the lease expires by itself
            print(f"loglake: speed {dataset}: could not release the stream's lease ({e}); it expires by itself",
                  file=sys.stderr, flush=True)


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


# A pause request outlives no holder: one whose process is gone (``_gone``) counts as none, and a
# stream waits for one at most its ``ttl``, measured on the stream's own clock.
PAUSE_TTL_SECONDS = 900.0


def _pause_slot(config, dataset: str) -> _FileSlot | _ObjectSlot:
    return _slot(config, f"{dataset}.pause-appends")


@contextmanager
def appends_paused(config, dataset: str, what: str, ttl: float = PAUSE_TTL_SECONDS) -> Iterator[None]:
    """Ask the speed stream of ``dataset`` to hold its appends while the block runs (see the
    module's docstring). Only the dataset's writer (the lease holder) asks."""
    slot = _pause_slot(config, dataset)
    now = _now()
    slot.put({"dataset": dataset, "what": what, "id": uuid.uuid4().hex, "host": socket.gethostname(),
              "where": _HOST, "pid": os.getpid(), "created": _created(os.getpid()), "since": _iso(now), "ttl": ttl})
    try:
        yield
    finally:
        slot.put(None)


def appends_pause(config, dataset: str) -> dict | None:
    """The request to pause the stream's appends of ``dataset`` (None: none, or its process is gone)."""
    request, _version = _pause_slot(config, dataset).read()
    return None if request is None or _gone(request) else request


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
