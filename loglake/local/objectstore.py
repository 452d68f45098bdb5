"""An S3-compatible object store on loopback: versitygw, for the suite and the benchmarks.

``python -m loglake.local.objectstore`` (``make setup``) builds versitygw ``VERSION`` (an
open-source S3 gateway written in Go) from the Go module proxy into ``binary_path()``, under
the cache, outside the repo. Go's own trees (GOPATH, the module and build caches) are kept
under ``<cache>/go`` too, so nothing lands in ``~/go``. The Go used is the first of ``go`` on
PATH, ``GO_LOCATIONS`` and a toolchain fetched earlier that is at least ``MIN_GO`` (what
versitygw's go.mod asks); when there is none, the Go toolchain ``TOOLCHAIN`` is fetched from
the proxy (``toolchain_url()``, the zip the ``go`` command itself switches to) into
``<cache>/go/toolchain/``. Repeated runs are no-ops: a stamp beside the binary holds a hash of
the build's arguments. The binary is built into a temporary directory and renamed into place,
so a failed or interrupted build never leaves one that looks usable.

``Gateway`` runs one versitygw on a free loopback port with its own data directory (a bucket
per subdirectory) and log: the real store an ``s3a://`` lake's tests and benchmarks write to,
with the conditional writes loglake relies on (``If-None-Match: *``, ``If-Match``).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from loglake.core.errors import PortInUseError, ProcessError, SetupError
from loglake.core.paths import cache_home
from loglake.core.processes import port_open, started_on_free_port, wait_for

VERSION = "1.8.0"
MODULE = "github.com/versity/versitygw/cmd/versitygw"
MIN_GO = (1, 25)  # versitygw 1.8.0's go.mod: go 1.25
TOOLCHAIN = "go1.26.8"  # fetched when no Go here is recent enough
PROXY = "https://proxy.golang.org"
GO_LOCATIONS = ("/usr/local/go/bin/go",)  # the official tarball's place, often not on make's PATH
REGION = "us-east-1"
STAMP_SUFFIX = ".stamp"

# The build: a static binary (no cgo: it runs on any Linux of the architecture), stripped of
# its symbol tables (-s -w), with no build paths of this machine inside, that says its version
# (versitygw's own Makefile sets main.Version; `go install` alone leaves "git").
# -mod=mod: resolve versitygw's own go.mod as is; -modcacherw: a module cache `rm -rf` can delete.
BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -modcacherw"}
BUILD_FLAGS = ("-trimpath", f"-ldflags=-s -w -X=main.Version=v{VERSION}")


def binary_path() -> Path:
    """Where the built versitygw lives: ``<cache>/bin/versitygw-VERSION``."""
    return cache_home() / "bin" / f"versitygw-{VERSION}"


def stamp_path() -> Path:
    return binary_path().with_name(f".{binary_path().name}{STAMP_SUFFIX}")


def go_home() -> Path:
    """GOPATH of the build, with its module cache (``pkg/mod``), kept for a rebuild without downloads."""
    return cache_home() / "go"


def toolchain_dir() -> Path:
    """Where a fetched Go toolchain is unpacked (its ``bin/go``)."""
    return go_home() / "toolchain" / TOOLCHAIN


def log_path() -> Path:
    return cache_home() / "logs" / "go-versitygw.log"


def _goarch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def toolchain_url() -> str:
    """The Go toolchain as a module on the proxy (``golang.org/toolchain``), for this OS and architecture."""
    return f"{PROXY}/golang.org/toolchain/@v/v0.0.1-{TOOLCHAIN}.{sys.platform}-{_goarch()}.zip"


def install_args() -> list[str]:
    """``go`` arguments that build versitygw into ``$GOBIN``."""
    return ["install", *BUILD_FLAGS, f"{MODULE}@v{VERSION}"]


def go_env(tmp: Path) -> dict[str, str]:
    """The environment of the build in ``tmp``: Go's trees under the cache (the build cache in
    ``tmp``, deleted with it: 430 MB, of use to a rebuild only), the binary into ``tmp``, this Go
    only (no switch to another toolchain on its own: which Go builds is decided here)."""
    home = go_home()
    return {**os.environ, "GOPATH": str(home), "GOMODCACHE": str(home / "pkg" / "mod"),
            "GOCACHE": str(tmp / "cache"), "GOBIN": str(tmp), "GOTOOLCHAIN": "local", **BUILD_ENV}


def stamp_value() -> str:
    """Hash of what decides the binary: the module, its version, the build's flags and settings."""
    h = hashlib.sha256(" ".join(install_args()).encode())
    h.update(repr(sorted(BUILD_ENV.items())).encode())
    return h.hexdigest()


def is_current() -> bool:
    """True when the binary is there, executable, and was built as ``install_args`` says now."""
    b = binary_path()
    try:
        return stamp_path().read_text().strip() == stamp_value() and b.is_file() and os.access(b, os.X_OK)
    except OSError:
        return False


def installed_binary(say=print) -> Path:
    """The built versitygw, built on first use (``make setup-test`` builds it beforehand)."""
    if not is_current():
        say(f"setup: building versitygw {VERSION} (an S3 server for the tests) from the Go module proxy, once ...")
        t0 = time.monotonic()
        ensure_binary()
        say(f"setup: versitygw ready in {time.monotonic() - t0:.1f}s")
    return binary_path()


# --- which Go ------------------------------------------------------------------------------


def parse_go_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of ``go env GOVERSION``'s answer (``go1.26.8``, ``go1.25rc1``); None if none."""
    m = re.search(r"\bgo(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def go_version(go: str) -> tuple[int, int] | None:
    """The version of the Go at ``go``; None when it does not run."""
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env={**os.environ, "GOTOOLCHAIN": "local"})
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_go_version(out.stdout) if out.returncode == 0 else None


def go_candidates() -> list[str]:
    """Where a Go may be, in order: PATH, ``GO_LOCATIONS``, a toolchain fetched earlier."""
    found = [shutil.which("go"), *GO_LOCATIONS, str(toolchain_dir() / "bin" / "go")]
    out: list[str] = []
    for c in found:
        if c and os.access(c, os.X_OK) and os.path.realpath(c) not in map(os.path.realpath, out):
            out.append(c)
    return out


def find_go() -> tuple[str | None, list[str]]:
    """The first Go of ``go_candidates`` at least ``MIN_GO``, and what was found too old or broken."""
    rejected = []
    for go in go_candidates():
        v = go_version(go)
        if v is not None and v >= MIN_GO:
            return go, rejected
        rejected.append(f"{go} ({'go%d.%d, too old' % v if v else 'does not run'})")
    return None, rejected


def fetch_toolchain(url: str | None = None) -> str:
    """Download and unpack the Go toolchain ``TOOLCHAIN`` into ``toolchain_dir()``; its ``go``."""
    url = url or toolchain_url()
    final = toolchain_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{TOOLCHAIN}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        archive = tmp / "toolchain.zip"
        try:
            with urllib.request.urlopen(url, timeout=60) as r, archive.open("wb") as out:
                shutil.copyfileobj(r, out, 1 << 20)
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp / "x")
        except (urllib.error.URLError, OSError, zipfile.BadZipFile) as e:
            raise SetupError(f"could not fetch the Go toolchain {TOOLCHAIN} from {url}: "
                             f"{getattr(e, 'reason', None) or e}") from None
        # The module zip holds one tree, golang.org/toolchain@v0.0.1-<version>.<os>-<arch>/.
        roots = [p.parent.parent for p in (tmp / "x").glob("*/*/bin/go")]
        if len(roots) != 1:
            raise SetupError(f"the Go toolchain from {url} has no single bin/go inside")
        root = roots[0]
        # Module zips keep no file modes: the commands and the tools must be made executable.
        for p in [*root.glob("bin/*"), *root.glob("pkg/tool/*/*")]:
            if p.is_file():
                p.chmod(0o755)
        if go_version(str(root / "bin" / "go")) is None:
            raise SetupError(f"the Go toolchain from {url} does not run here ({root / 'bin' / 'go'} env GOVERSION)")
        shutil.rmtree(final, ignore_errors=True)
        root.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(final / "bin" / "go")


def go_for_build() -> str:
    """A Go recent enough for versitygw: one found here, else the toolchain fetched from the proxy."""
    go, rejected = find_go()
    if go is not None:
        return go
    url = toolchain_url()
    try:
        return fetch_toolchain(url)
    except SetupError as e:
        looked = ", ".join(rejected) or "none on PATH" + "".join(f" or at {p}" for p in GO_LOCATIONS)
        raise SetupError(f"no Go {MIN_GO[0]}.{MIN_GO[1]}+ to build versitygw {VERSION} (found: {looked}), and {e}\n"
                         "  install Go from https://go.dev/dl/ (or put it on PATH), or allow HTTPS to "
                         f"{PROXY}") from None


# --- the build -----------------------------------------------------------------------------


def ensure_binary(force: bool = False) -> tuple[Path, bool]:
    """Make ``binary_path()`` hold versitygw ``VERSION``; returns (its path, whether it was there)."""
    if not force and is_current():
        return binary_path(), True
    cache_home().mkdir(parents=True, exist_ok=True)
    # One build at a time: concurrent setups would race on the toolchain, the temp dirs and the rename.
    with (cache_home() / ".setup_go.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and is_current():  # another run built it while we waited
            return binary_path(), True
        return _build_locked(), False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "    (no log)"


def _build_locked() -> Path:
    """``go install`` into a temp dir, check the binary runs, then rename it over ``binary_path()``."""
    go = go_for_build()
    final = binary_path()
    final.parent.mkdir(parents=True, exist_ok=True)
    for leftover in final.parent.glob(".versitygw.tmp-*"):  # from a run that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = final.parent / f".versitygw.tmp-{os.getpid()}"
    tmp.mkdir()
    log = log_path()
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        cmd = [go, *install_args()]
        with log.open("w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=go_env(tmp), cwd=tmp).returncode
        built = tmp / "versitygw"
        if rc != 0 or not built.is_file():
            what = f"go exited with {rc}" if rc != 0 else f"go left no {built.name} in GOBIN"
            raise SetupError(f"could not build versitygw {VERSION} with {go} ({what})\n"
                             f"  $ {' '.join(cmd)}\n  last lines of {log}:\n{_tail(log)}")
        check = subprocess.run([str(built), "--version"], capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
        if check.returncode != 0 or f"v{VERSION}" not in check.stdout:
            said = (check.stdout + check.stderr).strip()[-500:]
            raise SetupError(f"the versitygw {VERSION} just built does not run or says another version ({built} "
                             f"--version exited with {check.returncode}): {said}")
        # The binary first, then its stamp: a crash between the two leaves a binary whose stamp
        # does not match (built again next time), never a stamp vouching for another binary.
        os.replace(built, final)
        stamp_tmp = tmp / "stamp"
        stamp_tmp.write_text(stamp_value() + "\n")
        os.replace(stamp_tmp, stamp_path())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# --- the gateway ---------------------------------------------------------------------------


class Gateway:
    """One versitygw on ``127.0.0.1:port``, serving ``home/"s3"`` (a bucket per subdirectory),
    its output in ``home/"logs"/"versitygw.log"``; a single root account (``access_key``,
    ``secret_key``: random unless given; passed in its environment, never on its command line)."""

    def __init__(self, home: Path, port: int, access_key: str | None = None, secret_key: str | None = None):
        self.home = Path(home).absolute()
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
        return [str(installed_binary()), "--port", f"127.0.0.1:{self.port}", "--quiet", "posix", str(self.data_dir)]

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
    ap = argparse.ArgumentParser(prog="python -m loglake.local.objectstore",
                                 description=f"Build versitygw {VERSION} (an S3 gateway) from the Go module proxy "
                                             "into the cache.")
    ap.add_argument("--force", action="store_true", help="build again even when the stamp matches")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        path, cached = ensure_binary(force=args.force)
    except SetupError as e:
        print(f"versitygw {VERSION}: FAILED: {e}", file=sys.stderr)
        return 1
    if cached:
        print(f"versitygw {VERSION}: ok (already built)")
    else:
        print(f"versitygw {VERSION}: ok ({path.stat().st_size / 1e6:.1f} MB, built in {time.monotonic() - t0:.1f} s) "
              f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
