"""A lease record: where it lives, how it changes, when it may be broken (``DatasetLock``).

A small JSON record per dataset (and per dataset's stream, and per pause request): on a
filesystem a file changed under an ``flock`` of a guard file beside it (``FileSlot``); on an
object store an object changed by compare-and-swap (``ObjectSlot``: ``If-None-Match: *`` to
create it, ``If-Match: <etag>`` to change it). Its life, ``TTL_SECONDS``, is measured by whoever
would take it, on its own monotonic clock (``DatasetLock.expired``); the holder renews it every
``RENEW_SECONDS``. Both are read from this module when used (the fault tests shorten them).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import uuid
import fcntl
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import psutil

from loglake.core import objectstore

# A lease's life, measured by whoever would take it on its own clock; renewed six times in it.
# LOGLAKE_LEASE_TTL_SECONDS shortens it (the fault tests pause a holder past its life in seconds).
TTL_SECONDS = float(os.environ.get("LOGLAKE_LEASE_TTL_SECONDS", "60"))
RENEW_SECONDS = TTL_SECONDS / 6


def lock_dir(config) -> Path:
    """``lake.locks`` as a directory (a filesystem lake's leases)."""
    return Path(config.lock_root)


def process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def running(pid: int, created: float | None) -> bool:
    """Process ``pid`` runs, and is the same process (same start time: pids are reused)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and (created is None or proc.create_time() == created)
    except psutil.Error:
        return False


def host_identity() -> str | None:
    """Where this process's pids mean something: the kernel's boot id and this process's pid
    namespace. Processes with the same identity see each other's pids; a compose stack's
    replicas share a host name and a boot id, but each has a pid namespace of its own.
    None where either is unknown: no holder is then judged by its pid."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


HOST = host_identity()


def gone(record: dict) -> bool:
    """The process that wrote ``record`` ran where this one runs (``HOST``) and is gone."""
    return HOST is not None and record.get("where") == HOST and \
        not running(int(record.get("pid", 0)), record.get("created"))


def wall_clock() -> float:
    return time.time()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FileSlot:
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
        return parse(text), text

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


class ObjectSlot:
    """A lease record as an object on the lake's store, changed by compare-and-swap: created with
    ``If-None-Match: *``, replaced with ``If-Match: <etag>`` (the store arbitrates; no host's lock)."""

    def __init__(self, store, root: str, name: str):
        self.store, self.uri = store, f"{root.rstrip('/')}/{name}.json"

    def read(self) -> tuple[dict | None, str | None]:
        """(the record, its ETag), or (None, None)."""
        return objectstore.get_json(self.store, self.uri, answer_within())

    def swap(self, value: dict | None, version: str | None) -> bool:
        """As ``FileSlot.swap``. A lease is freed by a record with no holder (a conditional
        delete is not in every store's API)."""
        return objectstore.put_json(self.store, self.uri, value or {"released_at": iso(wall_clock())}, version,
                                    answer_within()) is not None

    def put(self, value: dict | None) -> None:
        if value is None:
            objectstore.delete(self.store, self.uri)
        else:
            objectstore.write_json(self.store, self.uri, value)


def answer_within() -> float:
    """How long one request about a lease may take: a renewal's interval (at least a second). A
    renewal not answered by then is made again (``writer``), not left to the SDK's backoff, which
    could outlast the lease."""
    return max(1.0, RENEW_SECONDS)


def parse(text: str | None) -> dict | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def slot(config, name: str) -> FileSlot | ObjectSlot:
    root = config.lock_root
    if objectstore.is_remote(root):
        return ObjectSlot(config.object_store, root, name)
    return FileSlot(Path(root), name)


def backoff() -> None:
    """A short random pause after a lost compare-and-swap, so racing writers (or a store that
    answers every conditional write with a conflict) do not spin."""
    time.sleep(random.uniform(0.01, 0.1))


class DatasetLock:
    """The lease of one dataset (``kind`` "writer"), or of its speed stream on an object-store lake
    (``kind`` "stream")."""

    def __init__(self, config, dataset: str, kind: str = "writer"):
        self.dataset = dataset
        self.slot = slot(config, dataset if kind == "writer" else f"{dataset}.{kind}")
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
        if gone(held):
            return True
        now = time.monotonic()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)
            return False
        return now - self._seen[1] >= float(held.get("ttl", TTL_SECONDS))

    @property
    def seen_version(self) -> str | None:
        """The version of the holder's record this lock watches (``expired``), None when none."""
        return self._seen[0] if self._seen else None

    def read(self) -> tuple[dict | None, str | None]:
        """(the holder's record, or None when free or released; its version)."""
        held, version = self.slot.read()
        return (held if held and held.get("token") else None), version

    def holder(self) -> dict | None:
        """The holder, or None: free, released, or held by a process of this host that is gone.
        (Whether a holder elsewhere still renews takes a lease's life to see: until someone
        takes it, it is shown.)"""
        held, _version = self.read()
        return None if held is None or gone(held) else held

    def try_acquire(self, operation: str, run_id: str | None = None,
                    token: str | None = None) -> tuple[str | None, dict | None, bool]:
        """(token, None, nested): taken, or already held under ``token`` (nested: by a parent);
        (None, holder, False): someone else holds it (``expired`` not yet: call again with the
        same lock to go on watching it)."""
        while True:
            held, version = self.read()
            if held is not None and token and held.get("token") == token:
                return token, None, True
            if held is not None and not self.expired(held, version):
                return None, held, False
            mine = uuid.uuid4().hex
            now = wall_clock()
            if self.slot.swap({"dataset": self.dataset, "operation": operation, "run_id": run_id, "token": mine,
                               "host": socket.gethostname(), "where": HOST, "pid": os.getpid(),
                               "created": process_start(os.getpid()), "acquired_at": iso(now), "ttl": TTL_SECONDS,
                               "renewals": 0, "expires": now + TTL_SECONDS, "expires_at": iso(now + TTL_SECONDS)},
                              version):
                self._seen = None
                return mine, None, False
            backoff()  # another writer changed it between our read and our write: read again

    def renew(self, token: str) -> bool:
        """Extend the lease held under ``token`` (a new version: whoever watches it counts its life
        again); False when it is no longer ours (taken once expired, or released)."""
        while True:
            held, version = self.read()
            if held is None or held.get("token") != token:
                return False
            now = wall_clock()
            # ``expires`` is the holder's own clock, for people reading the record; no taker reads it.
            held.update(renewals=int(held.get("renewals", 0)) + 1, ttl=TTL_SECONDS, expires=now + TTL_SECONDS,
                        expires_at=iso(now + TTL_SECONDS))
            if self.slot.swap(held, version):
                return True
            backoff()

    def release(self, token: str) -> None:
        while True:
            held, version = self.read()
            if held is None or held.get("token") != token or self.slot.swap(None, version):
                return
            backoff()
