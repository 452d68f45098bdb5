"""Leases: one writer per dataset, one speed stream per dataset, and the stream's pause.

One writer per dataset: a lease that batch runs, backfills, maintenance and loglake's
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

The package: ``records`` (the lease record, where it lives and how it changes: a file under an
``flock`` or an object changed by compare-and-swap; ``DatasetLock``; the lease's life
``TTL_SECONDS``), ``writer`` (a writer's lease, its renewals and the check before each commit),
``stream`` (the speed stream's lease) and ``pause`` (a writer's request that the stream hold its
appends). What the rest of loglake uses is named here.
"""

from loglake.leases.pause import PAUSE_TTL_SECONDS, appends_pause, appends_paused, wait_while_paused
from loglake.leases.records import DatasetLock, lock_dir
from loglake.leases.stream import StreamLease, stream_lease
from loglake.leases.writer import DEFAULT_WAIT_SECONDS, TOKEN_ENV, check_lease, current_token, holders, writer

__all__ = ["DEFAULT_WAIT_SECONDS", "PAUSE_TTL_SECONDS", "TOKEN_ENV", "DatasetLock", "StreamLease", "appends_pause",
           "appends_paused", "check_lease", "current_token", "holders", "lock_dir", "stream_lease",
           "wait_while_paused", "writer"]
