"""The local cluster secured: ``loglake cluster up`` with ``kafka.security`` runs its three
KRaft nodes with SASL/SCRAM over TLS (inter-broker traffic as the broker's own user, the
controller quorum over TLS with client certificates), all from one CA, certificate and broker
password under ``<state>/cluster/kafka/security``. Real processes, no mocks; kept short (the
Spark side of security is tested on the single broker in test_secure_kafka).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from loglake.core.config import load_config
from loglake.kafka.admin import end_offsets, ensure_topic
from loglake.core.processes import free_ports
from loglake.local.produce import produce
from loglake.testing import write_conf
from tests.system.test_secure_kafka import PASSWORD, TOKEN, USER, CommandLineWatch, shipped_security

pytestmark = pytest.mark.system


def test_a_secured_local_cluster(tmp_path, monkeypatch):
    home = tmp_path / "state"
    sec_dir = home / "cluster" / "kafka" / "security"

    def broker_password():
        f = sec_dir / "broker.password"
        return f.read_text().strip() if f.exists() else None

    watch = CommandLineWatch(lambda: [PASSWORD, TOKEN, broker_password()])
    watch.start()
    monkeypatch.setenv("LOGLAKE_KAFKA_USERNAME", USER)
    monkeypatch.setenv("LOGLAKE_KAFKA_PASSWORD", PASSWORD)
    monkeypatch.delenv("LOGLAKE_KAFKA_BOOTSTRAP", raising=False)
    env = None

    def loglake(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env, capture_output=True, text=True,
                              timeout=timeout)

    try:
        for attempt in range(3):  # a free port can be taken before a node binds it
            *kafka_ports, master_port = free_ports(4)
            conf = write_conf(
                tmp_path, ",".join(f"localhost:{p}" for p in kafka_ports),
                kafka={"embedded": True, "replication_factor": 3, "min_insync_replicas": 2,
                       "security": shipped_security()},
                spark={"master": f"spark://127.0.0.1:{master_port}"},
                local_cluster={"spark_workers": 1, "worker_cores": 1, "worker_memory": "512m"})
            env = {**os.environ, "LOGLAKE_CONF": str(conf), "LOGLAKE_HOME": str(home)}
            t0 = time.monotonic()
            up = loglake("cluster", "up")
            if up.returncode == 0 or "already in use" not in up.stderr + up.stdout:
                break
            loglake("cluster", "down")
        assert up.returncode == 0, up.stdout + up.stderr
        up_s = time.monotonic() - t0
        config = load_config(conf, home=home)
        assert config.kafka_ca_file == str(sec_dir / "ca.pem")

        st = loglake("cluster", "status")
        assert st.returncode == 0, st.stdout + st.stderr
        lines = st.stdout.splitlines()
        assert lines[0] == f"kafka bootstrap: {config.kafka.bootstrap_servers}"
        assert lines[1] == f"spark master: {config.profile.spark.master}"
        assert len([ln for ln in lines if re.search(r"kafka node \d\s+running \(pid \d+\)", ln)]) == 3, st.stdout

        # One CA, certificate and broker password for the three nodes, owner-only.
        assert stat.S_IMODE(sec_dir.stat().st_mode) == 0o700
        for name in ("ca.key", "broker.pem", "broker.password"):
            assert stat.S_IMODE((sec_dir / name).stat().st_mode) == 0o600, name
        for n in (1, 2, 3):
            props = (home / "cluster" / f"kafka-{n}" / "kafka" / "server.properties")
            assert stat.S_IMODE(props.stat().st_mode) == 0o600
            text = props.read_text()
            assert f"advertised.listeners=SASL_SSL://localhost:{kafka_ports[n - 1]}" in text
            assert "inter.broker.listener.name=SASL_SSL" in text and "CONTROLLER:SSL" in text
            assert f"ssl.keystore.location={sec_dir / 'broker.pem'}" in text
            assert not (home / "cluster" / f"kafka-{n}" / "kafka" / "security").exists()

        # Replicated over the secured inter-broker listener; produced and counted as the client user.
        ds = config.dataset("job_views")
        ensure_topic(config, ds)
        md = AdminClient(config.kafka_client_conf()).list_topics(ds.topic, timeout=15).topics[ds.topic]
        assert {len(p.replicas) for p in md.partitions.values()} == {3}
        assert {len(p.isrs) for p in md.partitions.values()} == {3}
        result = produce(config, ds, 300, seed=7)
        assert result.records == 300
        assert sum(end_offsets(config, ds.topic).values()) == 300

        # A wrong password is refused, and so is a plaintext client at a node's port.
        errors = []
        wrong = AdminClient({**config.kafka_client_conf(), "sasl.password": "not-" + PASSWORD, "log_level": 0,
                             "error_cb": lambda e: errors.append(str(e))})
        with pytest.raises(Exception):
            wrong.list_topics(timeout=5)
        wrong.poll(0)  # serves the error events
        assert any("invalid credentials" in e for e in errors), errors
        plain = AdminClient({"bootstrap.servers": f"localhost:{kafka_ports[1]}", "log_level": 0})
        with pytest.raises(Exception):
            plain.list_topics(timeout=3)

        own = broker_password()
        assert own and watch.scans > 5 and {"broker", "storage-format", "loglake-cli"} <= watch.seen, watch.seen
    finally:
        down = loglake("cluster", "down") if env else None
        watch.stop()
    assert down.returncode == 0, down.stdout + down.stderr
    assert watch.hits == [], watch.hits[:5]
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(home) in " ".join(p.info.get("cmdline") or [])]
    # Neither password in a log or an output; the broker's only in its file and the nodes' properties.
    logs = [f for f in home.rglob("*.log") if f.is_file()] + [f for f in (home / "cluster").rglob("*")
                                                              if f.is_file() and "log" in f.name]
    assert len(logs) >= 4, logs
    for secret in (TOKEN, own):
        assert not [f for f in logs if secret.encode() in f.read_bytes()]
        assert secret not in up.stdout + up.stderr + st.stdout + st.stderr + down.stdout + down.stderr
    assert TOKEN not in "".join(f.read_text(errors="replace") for f in home.rglob("*") if f.is_file()
                                 and f.suffix in (".properties", ".json", ".log", ".out"))
    assert up_s < 120
