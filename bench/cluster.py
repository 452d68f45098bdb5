"""C1–C3: the speed layer on the local cluster (``loglake cluster up``) beside embedded mode.

- C1 records/s of the speed layer, the same command in both modes: ``loglake speed run
  DATASET --available-now`` under spark-submit (records ÷ the micro-batches' processing
  time, JVM start excluded), on the benchmark dataset (1 KB records, 6 partitions, 200,000
  per micro-batch). Embedded: one broker, ``local[2]``. Cluster: 3 KRaft nodes (replication
  factor 3, min ISR 2, the producer's acks=all), a standalone master and 2 workers of one
  core each, the application alone on them with 2 cores (``spark.cores.max``), as
  ``local[2]`` has; and the same on 1 worker of one core (the capacity model's check,
  docs/capacity.md). Each run also says the CPU-seconds its parts used: the executors (the
  workers' process trees), the Kafka nodes, and the driver (spark-submit, a child of this
  process).
- C2 the stream's recovery after the leader of partition 0 is SIGKILLed: the continuous
  speed stream (supervised, as ``loglake speed start`` runs it) under a steady producer;
  seconds from the kill until the stream has passed the log end read at the kill.
- C3 the memory (PSS) of the local cluster: idle after ``cluster up``, and its maximum
  while C1's application runs (executors included; the driver is reported apart).
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext

from bench.harness import Harness, PeakPss, median, result
from loglake.testing import workload

RECORDS = 600_000
RECORD_BYTES = 1024
PER_BATCH = 200_000
KILLS = 3
RATE = 2000  # records/s while C2 kills the leader


def _config(h: Harness, name: str, bootstrap: str, **kwargs):
    """The bench workload's dataset on ``bootstrap`` (the profile's Spark settings as given:
    ``spark`` {} keeps write_conf's, not the harness's in-process ones)."""
    kwargs.setdefault("spark", {})
    return h.config(name, bootstrap, extra_datasets={workload.DATASET: workload.dataset_file(6)},
                    speed={"max_offsets_per_trigger": PER_BATCH}, **kwargs)


def _tree_cpu(pids: list[int]) -> float:
    """CPU-seconds the processes ``pids`` and everything below them used so far: each root's
    own and its reaped children's (an executor that ended is counted by its worker), each
    live descendant's own."""
    import psutil

    from loglake.core.processes import descendants

    total = 0.0
    for root in pids:
        for pid in descendants(root):
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + ((t.children_user + t.children_system) if pid == root else 0.0)
    return total


def _children_cpu() -> float:
    """CPU-seconds of this process's reaped children (the driver's spark-submit)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _speed_runs(h: Harness, name: str, bootstrap: str, records: int, memory=None, cpu=None,
                **kwargs) -> list[dict]:
    """``loglake speed run --available-now`` over one filled topic, from fresh state each run;
    ``cpu``: name → a callable giving the pids of a part whose CPU the run reports."""
    from loglake.kafka.admin import ensure_topic
    from loglake.speed.control import SpeedStream

    config = _config(h, f"{name}-produce", bootstrap, **kwargs)
    ds = config.dataset(workload.DATASET)
    topic = ensure_topic(config, ds)
    produced = workload.produce(bootstrap, topic, records, RECORD_BYTES)
    h.log(f"{name}: {records:,} × {RECORD_BYTES} B produced in {produced:.1f}s")
    suffix = topic.rpartition("-")[2]
    runs = []
    for i in range(h.repeats):
        run_config = _config(h, f"{name}-run{i}", bootstrap, topic_suffix=suffix, **kwargs)
        t0 = time.monotonic()
        cpu0 = {part: _tree_cpu(pids()) for part, pids in (cpu or {}).items()}
        driver0 = _children_cpu()
        with PeakPss(memory) if memory else nullcontext() as sampler:
            outcome = SpeedStream(run_config, run_config.dataset(workload.DATASET)).run_available_now()
        used = {part: round(_tree_cpu(pids()) - cpu0[part], 1) for part, pids in (cpu or {}).items()}
        used["driver"] = round(_children_cpu() - driver0, 1)
        if not outcome.ok or outcome.summary.records != records:
            raise RuntimeError(f"{name} speed run {i}: {outcome.summary or outcome.failure} (log {outcome.log})")
        s = outcome.summary
        run = {"records_per_second": s.records_per_second, "records": s.records, "batches": s.batches,
               "processing_seconds": s.processing_seconds, "wall_seconds": round(time.monotonic() - t0, 1),
               "produce_seconds": round(produced, 1), "cpu_seconds": used}
        if sampler:
            run["cluster_peak_pss_bytes"] = sampler.peak
        h.log(f"  {name} speed run {i}: {run['records_per_second']:,} rec/s over {run['batches']} micro-batches, "
              f"wall {run['wall_seconds']}s, CPU-s " + ", ".join(f"{k} {v}" for k, v in used.items()))
        runs.append(run)
    return runs


def _recovery(h: Harness, cluster, config) -> list[float]:
    """Seconds from each leader kill until the stream passed the log end at the kill."""
    from loglake.core.processes import wait_for
    from loglake.kafka.admin import end_offsets, ensure_topic
    from loglake.speed.control import SpeedStream
    from loglake.testing import caught_up

    ds = config.dataset(workload.DATASET)
    topic = ensure_topic(config, ds)
    stop = threading.Event()

    def ingest():
        while not stop.is_set():
            workload.produce(config.kafka.bootstrap_servers, topic, RATE, RECORD_BYTES, rate=RATE)

    stream = SpeedStream(config, ds)
    stream.start()
    producer = threading.Thread(target=ingest, daemon=True)
    seconds = []
    try:
        stream.wait_first_batch(300)
        producer.start()
        for i in range(KILLS):
            time.sleep(10)
            leader = cluster.leader(topic, 0)
            leader.kill()
            killed = time.monotonic()
            ends = end_offsets(config, topic)
            wait_for(lambda: caught_up(config, ds, ends), 300, "the stream to pass the log end at the kill",
                     interval=0.5, log=stream.process)
            seconds.append(round(time.monotonic() - killed, 1))
            h.log(f"  leader kill {i + 1} (node at {leader.bootstrap}): the stream passed the log end at the kill "
                  f"{seconds[-1]}s later")
            cluster.up(say=lambda _line: None)  # the node back before the next kill
    finally:
        stop.set()
        if producer.is_alive():
            producer.join(60)
        stream.stop()
    return seconds


def _wait_executors_gone(cluster, timeout: float = 30) -> None:
    """Until no worker has a process below it: the application's executors ended and were
    reaped, so their CPU is in their worker's."""
    from loglake.core.processes import descendants

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(len(descendants(m.pid())) <= 1 for m in cluster.workers() if m.pid()):
            return
        time.sleep(0.5)


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    from loglake.core.processes import free_ports
    from loglake.local.cluster import LocalCluster

    want = {m for m in ("C1", "C2", "C3") if only is None or m in only}
    if not want:
        return []
    h.stop_spark()  # the cores go to the clusters' JVMs
    records = max(PER_BATCH, int(RECORDS * (0.2 if h.quick else 1.0)))
    out = []
    embedded = _speed_runs(h, "embedded", h.bootstrap, records) if "C1" in want else []

    def cluster_config(name: str, workers: int):
        *ports, master_port = free_ports(4)
        kw = dict(kafka={"embedded": True, "replication_factor": 3, "min_insync_replicas": 2},
                  spark={"master": f"spark://127.0.0.1:{master_port}", "executor_memory": "1g",
                         "conf": {"spark.cores.max": str(workers)}},
                  local_cluster={"spark_workers": workers, "worker_cores": 1, "worker_memory": "2g"})
        bootstrap = ",".join(f"localhost:{p}" for p in ports)
        return _config(h, name, bootstrap, **kw), bootstrap, kw

    def up(config) -> tuple[LocalCluster, float]:
        cluster = LocalCluster(config)
        t0 = time.monotonic()
        cluster.up(say=lambda _line: None)
        return cluster, time.monotonic() - t0

    def parts(cluster) -> dict:
        """The cluster's parts whose CPU a run reports: executors under the workers, the Kafka nodes."""
        def executors():
            _wait_executors_gone(cluster)
            return [m.pid() for m in cluster.workers() if m.pid()]
        return {"executors": executors, "kafka": lambda: [n.pid for n in cluster.kafka_nodes() if n.pid]}

    one_worker = []
    if "C1" in want:  # the capacity model's second size: the same application on 1 worker of 1 core
        config, bootstrap, cluster_kw = cluster_config("cluster1", 1)
        cluster, up_seconds = up(config)
        try:
            h.log(f"cluster of 1 worker up in {up_seconds:.1f}s")
            one_worker = _speed_runs(h, "cluster-1-worker", bootstrap, records, cpu=parts(cluster), **cluster_kw)
        finally:
            cluster.down(say=lambda _line: None)

    config, bootstrap, cluster_kw = cluster_config("cluster", 2)
    cluster, up_seconds = up(config)
    try:
        time.sleep(5)
        idle = cluster.memory_bytes()
        h.log(f"cluster up in {up_seconds:.1f}s, {idle / 2**20:,.0f} MiB PSS idle")
        on_cluster = _speed_runs(h, "cluster", bootstrap, records, memory=cluster.pids, cpu=parts(cluster),
                                 **cluster_kw) if want & {"C1", "C3"} else []
        kills = _recovery(h, cluster, _config(h, "cluster-c2", bootstrap, **cluster_kw)) if "C2" in want else []
    finally:
        cluster.down(say=lambda _line: None)

    if "C1" in want:
        emb = median([r["records_per_second"] for r in embedded])
        clu = median([r["records_per_second"] for r in on_cluster])
        one = median([r["records_per_second"] for r in one_worker])
        m = result("C1", "speed layer on the local cluster (records/s)", clu, "records/s",
                   reference={"embedded records/s": emb, "1 worker records/s": one},
                   runs=[{"embedded": e, "cluster": c, "cluster_1_worker": o}
                         for e, c, o in zip(embedded, on_cluster, one_worker)],
                   detail={"records": records, "record_bytes": RECORD_BYTES, "partitions": 6,
                           "max_offsets_per_trigger": PER_BATCH, "cluster_over_embedded": round(clu / emb, 3),
                           "two_workers_over_one": round(clu / one, 3),
                           "cpu_seconds_per_million": {
                               name: {part: round(median([r["cpu_seconds"][part] * 1e6 / r["records"] for r in runs]), 1)
                                      for part in runs[0]["cpu_seconds"]}
                               for name, runs in (("embedded", embedded), ("1 worker", one_worker),
                                                  ("2 workers", on_cluster))}},
                   chart={"kind": "bar", "labels": ["embedded (1 broker, local[2])",
                                                    "local cluster, 1 worker (1 core)",
                                                    "local cluster, 2 workers (1 core each)"],
                          "values": [emb, one, clu], "ylabel": "records/s (1 KB, 6 partitions)"})
        m["summary"] = (f"cluster {clu:,.0f} rec/s on 2 workers, {one:,.0f} on 1 (× {clu / one:.2f}); "
                        f"embedded {emb:,.0f} rec/s (cluster × {clu / emb:.2f})")
        out.append(m)
    if "C2" in want:
        m = result("C2", "stream recovery after the leader broker's SIGKILL", median(kills), "s",
                   runs=[{"kill": i + 1, "seconds": s} for i, s in enumerate(kills)],
                   detail={"kills": KILLS, "rate_records_per_second": RATE, "max_seconds": max(kills)},
                   chart={"kind": "bar", "labels": [f"kill {i + 1}" for i in range(len(kills))], "values": kills,
                          "ylabel": "seconds until past the log end at the kill"})
        m["summary"] = f"median {median(kills)}s, max {max(kills)}s over {len(kills)} kills at {RATE} rec/s"
        out.append(m)
    if "C3" in want:
        peak = median([r["cluster_peak_pss_bytes"] for r in on_cluster]) if on_cluster else None
        gib = lambda b: round(b / 2**30, 2)  # noqa: E731
        m = result("C3", "memory of the local cluster (PSS)", gib(idle), "GiB",
                   detail={"idle_bytes": idle, "peak_during_speed_run_bytes": peak, "up_seconds": round(up_seconds, 1),
                           "nodes": "3 Kafka (512m heap each), Spark master, 2 workers"},
                   chart={"kind": "bar", "labels": ["idle", "while C1's application runs"],
                          "values": [gib(idle), gib(peak or 0)], "ylabel": "GiB (PSS)"})
        m["summary"] = (f"idle {gib(idle)} GiB (3 Kafka nodes, master, 2 workers), "
                        f"{gib(peak or 0)} GiB at most while the speed layer's executors ran; up in {up_seconds:.0f}s")
        out.append(m)
    return out
