"""A real Prometheus (Debian's ``prometheus`` package, setup/system-deps.sh) for the tests:
started on a free port with its own data directory, scraping loglake's targets file
(``<state>/metrics/targets.json``, ``file_sd_configs``) every second and evaluating the rule
files it is given every second; read through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from loglake.core.errors import PortInUseError
from loglake.core.processes import started_on_free_port

BINARY = "prometheus"


class Prometheus:
    def __init__(self, root: Path, targets_file: Path, rule_files: list[Path] = (), port: int = 0):
        self.root, self.targets_file, self.rule_files, self.port = root, targets_file, list(rule_files), port
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.root / "prometheus.log"

    def start(self, timeout: float = 60.0) -> None:
        binary = shutil.which(BINARY) or "/usr/bin/prometheus"
        self.root.mkdir(parents=True, exist_ok=True)
        conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in self.rule_files],
                "scrape_configs": [{"job_name": "loglake", "file_sd_configs": [
                    {"files": [str(self.targets_file)], "refresh_interval": "1s"}]}]}
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(conf))
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={self.root / 'prometheus.yml'}", f"--storage.tsdb.path={self.root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = self.log_file.read_text()[-2000:]
                if "address already in use" in said:
                    raise PortInUseError(f"prometheus: port {self.port} is taken", self.port)
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {said}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"prometheus not ready in {timeout:.0f}s: {self.log_file.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict, float]]:
        """An instant query: (labels, value) per series."""
        return [(r["metric"], float(r["value"][1])) for r in self.api("query", query=expr)["result"]]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]


def start_prometheus(root: Path, targets_file: Path, rule_files: list[Path] = ()) -> Prometheus:
    """A Prometheus on a free port (another one tried if the port was taken meanwhile)."""
    return started_on_free_port(lambda port: Prometheus(root / f"prometheus-{port}", targets_file, rule_files, port),
                                lambda p: p.start())
