"""The shared Spark application: one long-lived driver that runs loglake's batch-side jobs
on request, so a DAG task or a CLI command costs its work, not a JVM and a Spark session.

``loglake up`` starts it (``loglake.jobs.shared_app``) under spark-submit, with the profile's
master, jars and settings, like any job. It listens on a loopback port and writes its
address and a secret token to ``<state>/run/spark-jobs.json`` (mode 0600); a client
(``loglake.jobs.shared_app.submit``) connects, sends one JSON request line — the token, the
job's request (``loglake.jobs.requests``, as JSON), which configuration, state and
code it was built for, and the dataset lease it runs under if its caller holds one —
and reads back JSON lines: the job's own output lines (``{"line": ...}``), then one
``{"summary": ..., "code": ...}`` (the summary of ``loglake.jobs.protocol``, as a spark-submitted
job writes it). A request for other settings or other code is refused (``{"refused":
reason}``): the client then runs the job under spark-submit, as without the server.

Each job runs in a thread of its own with a Spark session of its own
(``SparkSession.newSession``: its SQL settings and Delta commit metadata stay its own;
the SparkContext, the JVM and Delta's caches are shared) and a job group, cancelled when
the client goes away (an Airflow task killed or timed out). Jobs of different datasets run
side by side up to ``LOGLAKE_SPARK_JOBS_CONCURRENCY`` (2); each dataset's writers still
take turns through the dataset's lease (``loglake.leases``), and the jobs the registry
marks ``gated`` (quality) one at a time behind the quality gate.
Once ready, when a dataset has quality expectations, it imports Great Expectations in a
thread (``_preload_quality``): the first quality gate finds it imported.
SIGTERM stops it: running jobs are cancelled (their clients see a transient failure and
retry), the session is stopped.

The order of locks, for every job: **the dataset's lease first, then a slot, then (a quality
job) the quality gate; released in reverse.** A job holds a slot or the gate only once it
holds its lease, so it never waits for a lease while holding what another job needs: a
lease holder outside this process (``loglake batch`` holds it across its batch and quality
jobs, sending each here with its token) always gets a slot and the gate, from jobs that
hold leases of their own and run to their end. Taken in the other order, a scheduled run's
quality job held the gate while it waited (up to ``LOGLAKE_WRITER_WAIT_SECONDS``) for the
lease that ``loglake batch`` held while its quality job waited for the gate (issue 44).
``entry.execute`` takes the lease and then opens the job's session (``Server._session``),
which takes the slot and the gate; a job whose caller goes away while it waits for any of
them stops at once (``JobCancelled``) and never writes.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import os
import secrets
import select
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from loglake.core.config import Config, load_config
from loglake.core.errors import JobCancelled, JobFailure, LoglakeError, ParamError
from loglake.jobs import registry
from loglake.jobs.launch import spark_conf
from loglake.jobs.requests import JobRequest
from loglake.jobs.session import get_spark
from loglake.jobs.shared_app import address_file, identity
from loglake.observe import exporter
from loglake.jobs import entry

SERVED = {name: registry.JOBS[name].module for name in registry.served()}


class _ThreadOutput(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the server: a job thread's writes go to its client,
    everything else to the server's log."""
    def __init__(self, base, sinks: threading.local):
        self.base, self.sinks = base, sinks

    def write(self, text: str) -> int:
        sink = getattr(self.sinks, "sink", None)
        if sink is None:
            return self.base.write(text)
        sink(text)
        return len(text)

    def flush(self) -> None:
        self.base.flush()

    def fileno(self) -> int:
        return self.base.fileno()


class Server:
    def __init__(self, config: Config, spark, identity: dict, identity_conf: dict[str, str], concurrency: int):
        # What a request must match: its state, conf, profile and code (``identity``), and the
        # profile's Spark settings now (``identity_conf``: those the application started with).
        self.config, self.spark, self.identity, self.identity_conf = config, spark, identity, identity_conf
        self.token = secrets.token_hex(16)
        self.slots = threading.BoundedSemaphore(concurrency)
        self.concurrency = concurrency
        self.quality_gate = threading.Lock()
        self.sinks = threading.local()
        self.running: dict[str, str] = {}  # job group → job description
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.served = 0

    # -- one request ---------------------------------------------------------------------
    def handle(self, conn: socket.socket) -> None:
        reader = conn.makefile("r", encoding="utf-8")
        send_lock = threading.Lock()

        def send(obj: dict) -> bool:
            data = (json.dumps(obj, default=str) + "\n").encode()
            with send_lock:
                try:
                    conn.sendall(data)
                    return True
                except OSError:
                    return False

        try:
            message = json.loads(reader.readline() or "null")
        except ValueError:
            message = None
        if not isinstance(message, dict) or not secrets.compare_digest(str(message.get("token", "")), self.token):
            send({"refused": "not a request of this state directory's clients (wrong or missing token)"})
            return
        if message.get("ping"):
            send({"pong": True, "pid": os.getpid(), "running": dict(self.running), "served": self.served,
                  **self.identity})
            return
        reason = self._refusal(message)
        if reason:
            send({"refused": reason})
            return
        asked = message["request"]
        group = f"loglake-{asked['job']}-{secrets.token_hex(4)}"
        with self.lock:
            self.running[group] = " ".join(str(asked.get(k, "")) for k in ("job", "dataset"))
        gone = threading.Event()
        outcome: dict = {}
        worker = threading.Thread(target=self._run, name=group, daemon=True,
                                  args=(asked, message.get("lease"), group, gone, send, outcome))
        worker.start()
        # The client only listens; if it goes away (its task was killed), cancel the job.
        try:
            while worker.is_alive():
                worker.join(0.5)
                if worker.is_alive() and _closed(conn):
                    gone.set()
                    self._cancel(group, "its client went away")
                    worker.join()
        finally:
            with self.lock:
                self.running.pop(group, None)
        send({"summary": outcome.get("summary"), "code": outcome.get("code", 1)})

    def _refusal(self, message: dict) -> str | None:
        asked = message.get("request")
        job = asked.get("job") if isinstance(asked, dict) else None
        if job not in SERVED:
            return f"job {job!r} is not run by the shared application (one of {', '.join(SERVED)})"
        if self.stopping.is_set():
            return "the shared application is stopping"
        for key, what in (("home", "state directory"), ("conf", "conf directory"), ("profile", "profile"),
                          ("code", "code (loglake/, spark_jobs/ changed since it started)")):
            if message.get(key) != self.identity[key]:
                return f"it runs for another {what}: {self.identity[key]!r}, not {message.get(key)!r}"

        try:
            now = spark_conf(load_config())
        except LoglakeError as e:
            return f"the configuration does not load: {e}"
        if now != self.identity_conf:
            return "the profile's Spark settings changed since it started (`loglake down` and `up` restart it)"
        return None

    def _run(self, asked: dict, lease: str | None, group: str, gone: threading.Event, send, outcome: dict) -> None:

        self.sinks.sink = lambda text: send({"line": text})
        try:
            request = JobRequest.from_dict(asked)
            body = importlib.import_module(SERVED[request.job]).run_job
            queued: dict[str, float] = {}
            turn = functools.partial(self._session, group, request, gone, queued)
            # The lease first (``entry.execute``), then a slot and the gate (``_session``).
            summary = entry.execute(request, body, turn, inherited=lease, export=False, cancel=gone)
            outcome.update(summary=replace(summary, queued_seconds=queued.get("seconds")).to_dict(), code=0)
        except LoglakeError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
            outcome.update(summary=JobFailure.of(e).to_dict(), code=2)
        except Exception as e:
            known = entry.known_jvm_error(e)
            if known is not None:
                print(f"{type(known).__name__}: {known}", file=sys.stderr, flush=True)
                outcome.update(summary=JobFailure.of(known).to_dict(), code=2)
            else:
                traceback.print_exc()
                outcome.update(summary=JobFailure.of(e).to_dict(), code=1)
        finally:
            self.sinks.sink = None
            with self.lock:
                self.served += 1
            self._log(f"{group} {asked.get('dataset')}: {'ok' if outcome.get('code') == 0 else 'failed'}")

    @contextmanager
    def _session(self, group: str, request: JobRequest, gone: threading.Event, queued: dict, config: Config,
                 name: str):
        """The job's turn and its session: opened by ``entry.execute`` inside the dataset's lease,
        it takes a slot, then (a quality job) the quality gate — the order of the module's
        docstring. ``queued["seconds"]``: how long it waited for them."""
        waited = time.monotonic()
        with self._taken(self.slots, gone, request.dataset, "a free slot"), \
                (self._taken(self.quality_gate, gone, request.dataset, "the quality gate")
                 if registry.job(request.job).gated else nullcontext()):
            queued["seconds"] = round(time.monotonic() - waited, 3)
            session = self.spark.newSession()
            sc = self.spark.sparkContext
            sc.setJobGroup(group, name, interruptOnCancel=True)
            try:
                yield session, 0.0, True
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
                sc.setLocalProperty("spark.job.description", None)

    @staticmethod
    @contextmanager
    def _taken(lock, gone: threading.Event, dataset: str, what: str):
        """Hold ``lock`` (a lock or a semaphore) for the block; ``JobCancelled`` as soon as the
        job's caller went away while it waited."""
        while not lock.acquire(timeout=0.5):
            if gone.is_set():
                raise JobCancelled(dataset, f"its caller went away while it waited for {what} of the shared "
                                         "Spark application")
        try:
            yield
        finally:
            lock.release()

    def _cancel(self, group: str, why: str) -> None:
        self._log(f"{group}: cancelled ({why})")
        self.spark.sparkContext.cancelJobGroup(group)

    def cancel_all(self, why: str) -> None:
        for group in list(self.running):
            self._cancel(group, why)

    def _log(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        sys.__stdout__.write(f"{stamp} loglake spark-jobs: {message}\n")
        sys.__stdout__.flush()


def _preload_quality(server: Server) -> None:
    """Import Great Expectations while the application waits for its first request: the quality
    gate's first run no longer pays its import (8-10 s of one core on a 2-core machine,
    bench/results/levers-2026-11-30), which every quality job of this process would otherwise
    wait for once. The same import a quality job makes (Python imports a module once; a job
    arriving meanwhile waits for this import instead of starting its own)."""
    started = time.monotonic()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # as loglake.quality.gate sets it
    try:
        importlib.import_module("great_expectations")
    except Exception as e:  # noqa: BLE001 - the quality job that needs it says why, in its own words
        server._log(f"Great Expectations not imported ahead of the quality gate: {type(e).__name__}: {e}")
        return
    server._log(f"Great Expectations imported ahead of the quality gate in {time.monotonic() - started:.1f}s")


def _closed(conn: socket.socket) -> bool:
    """Whether the peer closed the connection (it sends nothing after its request)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class JobsCollector(Collector):
    """The shared application's jobs as it runs them (served on ``metrics.jobs_port``)."""

    def __init__(self, server: Server):
        self.server = server

    def collect(self):
        running = GaugeMetricFamily("loglake_shared_jobs_running", "Jobs the shared Spark application runs now, "
                                    "by kind.", labels=["kind"])
        kinds: dict[str, int] = {}
        for description in list(self.server.running.values()):
            kind = description.split(" ", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        for kind in sorted(set(SERVED) | set(kinds)):
            running.add_metric([kind], kinds.get(kind, 0))
        yield running
        yield CounterMetricFamily("loglake_shared_jobs_served", "Jobs the shared Spark application ran to their "
                                  "end.", value=self.server.served)
        yield GaugeMetricFamily("loglake_shared_jobs_concurrency", "Jobs it runs at a time at most.",
                                value=self.server.concurrency)


def serve(argv: list[str] | None = None) -> int:
    config = load_config()
    concurrency = int(os.environ.get("LOGLAKE_SPARK_JOBS_CONCURRENCY", "2"))
    if concurrency < 1:
        raise ParamError("LOGLAKE_SPARK_JOBS_CONCURRENCY", f"must be a whole number >= 1, not {concurrency}")
    spark = get_spark(config, "loglake-jobs")
    server = Server(config, spark, identity(config), spark_conf(config), concurrency)
    # Job threads' output goes to their clients; the rest (and the JVM's) to the server's log.
    sys.stdout = _ThreadOutput(sys.__stdout__, server.sinks)
    sys.stderr = _ThreadOutput(sys.__stderr__, server.sinks)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            server.handle(self.request)

    class TCP(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    tcp = TCP(("127.0.0.1", 0), Handler)
    target = address_file(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"host": "127.0.0.1", "port": tcp.server_address[1], "token": server.token, "pid": os.getpid(),
                   **server.identity}, f)
    tmp.replace(target)

    def on_term(signum, frame):
        server.stopping.set()
        threading.Thread(target=tcp.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    exporter.serve_process(config, "spark-jobs", config.profile.metrics.jobs_port, JobsCollector(server))
    server._log(f"ready at 127.0.0.1:{tcp.server_address[1]} (pid {os.getpid()}, code {server.identity['code']}, "
                f"{concurrency} job(s) at a time)")
    if any(ds.quality for ds in config.datasets.values()):
        threading.Thread(target=_preload_quality, args=(server,), name="preload", daemon=True).start()
    try:
        tcp.serve_forever(poll_interval=0.5)
    finally:
        try:
            current = json.loads(target.read_text())
            if current.get("pid") == os.getpid():
                target.unlink()
        except (OSError, ValueError):
            pass
        exporter.unregister(config, "spark-jobs")
        server.cancel_all("the shared application is stopping")
        tcp.server_close()
        spark.stop()
        server._log("stopped")
    return 0
