"""An S3-compatible object store on loopback: versitygw, for the suite and the benchmarks.

``python -m loglake.local.versitygw`` (``make setup-test``) builds versitygw ``VERSION`` (an
open-source S3 gateway written in Go) from the Go module proxy into the cache, outside the repo
(``VERSITYGW``, a ``loglake.local.gobuild.GoBinary``: where it lives, its stamp, which Go).

``Gateway`` runs one versitygw on a free loopback port with its own data directory (a bucket
per subdirectory) and log: the real store an ``s3a://`` lake's tests and benchmarks write to,
with the conditional writes loglake relies on (``If-None-Match: *``, ``If-Match``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from loglake.core.errors import PortInUseError, ProcessError
from loglake.core.processes import port_open, started_on_free_port, wait_for
from loglake.local.gobuild import GoBinary

VERSION = "1.8.0"
REGION = "us-east-1"
# versitygw's own Makefile sets main.Version (`go install` alone leaves "git"); its go.mod: go 1.25.
VERSITYGW = GoBinary("versitygw", "github.com/versity/versitygw/cmd/versitygw", VERSION,
                     ldflags=(f"-X=main.Version=v{VERSION}",), purpose="an S3 server for the tests")


def installed_binary(say=print) -> Path:
    """The built versitygw, built on first use (``make setup-test`` builds it beforehand)."""
    return VERSITYGW.installed(say)


# --- the gateway ---------------------------------------------------------------------------


class Gateway:
    """One versitygw on ``127.0.0.1:port``, serving ``home/"s3"`` (a bucket per subdirectory),
    its output in ``home/"logs"/"versitygw.log"``; a single root account (``access_key``,
    ``secret_key``: random unless given; passed in its environment, never on its command line)."""

    def __init__(self, home: Path, port: int, access_key: str | None = None, secret_key: str | None = None,
                 quiet: bool = True):
        self.home = Path(home).absolute()
        self.quiet = quiet  # False: a line per request in the log (a probe counting requests)
        self.port = port
        self.access_key = access_key or "LL" + secrets.token_hex(8).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.data_dir = self.home / "s3"
        self.log_path = self.home / "logs" / "versitygw.log"
        self._proc: subprocess.Popen | None = None

    @classmethod
    def on_free_port(cls, home: Path, attempts: int = 3, timeout: float = 30.0, **keys) -> Gateway:
        """A started gateway on a port free right now (on a fresh one when another process took
        it before versitygw bound it)."""
        return started_on_free_port(lambda port: cls(home, port, **keys), lambda g: g.start(timeout=timeout),
                                    attempts)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __repr__(self) -> str:  # no secret in it
        return f"Gateway(home={str(self.home)!r}, endpoint={self.endpoint!r}, access_key={self.access_key!r})"

    def command(self) -> list[str]:
        # --quiet: no line per request in the log (a benchmark makes many thousands).
        quiet = ["--quiet"] if self.quiet else []
        return [str(installed_binary()), "--port", f"127.0.0.1:{self.port}", *quiet, "posix", str(self.data_dir)]

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def answers(self, timeout: float = 2.0) -> bool:
        """Whether it answers HTTP (an anonymous request is refused with 403: that is an answer)."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=timeout):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = 30.0) -> None:
        """Start it (a no-op when it runs) and wait until it answers."""
        if self.is_running():
            wait_for(self.answers, timeout, f"versitygw at {self.endpoint}")
            return
        if port_open(self.port):
            raise PortInUseError(f"versitygw's port {self.port} is taken by another process", self.port)
        cmd = self.command()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # Both names of each key: versitygw takes the first of its variables that is set.
        keys = {"ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_ACCESS_KEY": self.access_key,
                "ROOT_SECRET_ACCESS_KEY": self.secret_key, "ROOT_SECRET_KEY": self.secret_key}
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **keys}, cwd=self.home)
        try:
            wait_for(lambda: self.answers() or not self.is_running(), timeout, f"versitygw at {self.endpoint}")
        except ProcessError as e:
            self.stop()
            raise ProcessError(f"{e}\n--- last lines of {self.log_path} ---\n{self._log_since(offset)}") from None
        if not self.is_running():
            tail = self._log_since(offset)
            self._proc = None
            if "address already in use" in tail:
                raise PortInUseError(f"versitygw's port {self.port} was taken before it bound it", self.port)
            raise ProcessError(f"versitygw exited at start; last lines of {self.log_path}:\n{tail}")

    def _log_since(self, offset: int, lines: int = 15) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                return "\n".join(f.read().decode(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM, SIGKILL after ``timeout``; True if it was running."""
        proc, self._proc = self._proc, None
        if proc is None:
            return False
        running = proc.poll() is None
        if running:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return running

    def __enter__(self) -> Gateway:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self, secret_key: str | None = None):
        """A boto3 S3 client of the root account (path-style, ``REGION``); ``secret_key`` replaces its secret."""
        conf = BotoConfig(s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=30,
                          retries={"mode": "standard", "max_attempts": 3})
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key, config=conf)

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name``; a no-op when it exists."""
        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise

    def write_credentials_file(self, path: Path) -> Path:
        """An AWS shared-credentials file (``[default]``) of the root account at ``path``, mode 0600."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(fd, 0o600)  # a file that was there keeps its mode through O_CREAT
            f.write(f"[default]\naws_access_key_id = {self.access_key}\naws_secret_access_key = {self.secret_key}\n")
        return path

    def settings(self, credentials_file: Path | str) -> dict:
        """The profile's ``lake.object_store`` block for this gateway (``ObjectStoreSettings``)."""
        return {"endpoint": self.endpoint, "region": REGION, "credentials_file": str(credentials_file),
                "path_style": True}


def main(argv: list[str] | None = None) -> int:
    return VERSITYGW.main(argv, prog="python -m loglake.local.versitygw")


if __name__ == "__main__":
    sys.exit(main())
