"""Go programs loglake runs, built from the Go module proxy into the cache, outside the repo.

A ``GoBinary`` is one command of a Go module at a version (versitygw, the S3 server of the
suite, ``loglake.local.versitygw``; statsd_exporter, which takes Airflow's StatsD,
``loglake.local.statsd_exporter``). ``ensure`` builds it with ``go install`` into
``path`` (``<cache>/bin/<name>-<version>``); Go's own trees (GOPATH, the module and build caches)
are kept under ``<cache>/go`` too, so nothing lands in ``~/go``. The Go used is the first of
``go`` on PATH, ``GO_LOCATIONS`` and a toolchain fetched earlier that is at least the binary's
``min_go`` (what its go.mod asks); when there is none, the Go toolchain ``TOOLCHAIN`` is fetched
from the proxy (``toolchain_url()``, the zip the ``go`` command itself switches to) into
``<cache>/go/toolchain/``. Repeated runs are no-ops: a stamp beside the binary holds a hash of
the build's arguments. The binary is built into a temporary directory, asked its version and
only then renamed into place, so a failed or interrupted build never leaves one that looks
usable.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loglake.core.errors import SetupError
from loglake.core.paths import cache_home

TOOLCHAIN = "go1.26.8"  # fetched when no Go here is recent enough
PROXY = "https://proxy.golang.org"
GO_LOCATIONS = ("/usr/local/go/bin/go",)  # the official tarball's place, often not on make's PATH
STAMP_SUFFIX = ".stamp"

# Every build: a static binary (no cgo: it runs on any Linux of the architecture), stripped of
# its symbol tables (-s -w), with no build paths of this machine inside. -mod=mod: resolve the
# module's own go.mod as is; -modcacherw: a module cache `rm -rf` can delete.
BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -modcacherw"}


def go_home() -> Path:
    """GOPATH of the builds, with its module cache (``pkg/mod``), kept for a rebuild without downloads."""
    return cache_home() / "go"


def toolchain_dir() -> Path:
    """Where a fetched Go toolchain is unpacked (its ``bin/go``)."""
    return go_home() / "toolchain" / TOOLCHAIN


def _goarch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def toolchain_url() -> str:
    """The Go toolchain as a module on the proxy (``golang.org/toolchain``), for this OS and architecture."""
    return f"{PROXY}/golang.org/toolchain/@v/v0.0.1-{TOOLCHAIN}.{sys.platform}-{_goarch()}.zip"


@dataclass(frozen=True)
class GoBinary:
    """The command ``name`` of Go package ``package`` (a module's main package) at ``version``.

    ``ldflags``: the ``-X`` settings that make it say its version (what the project's own
    Makefile sets; ``go install`` alone leaves none); ``purpose``: what it is for, in the
    progress line; ``min_go``: the Go its go.mod asks for. Its ``--version`` must name
    ``version`` (``v1.8.0`` or ``0.31.0``) for a build to be kept."""

    name: str
    package: str
    version: str
    ldflags: tuple[str, ...]
    purpose: str
    min_go: tuple[int, int] = (1, 25)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def path(self) -> Path:
        """Where the built binary lives: ``<cache>/bin/<name>-<version>``."""
        return cache_home() / "bin" / f"{self.name}-{self.version}"

    @property
    def stamp_path(self) -> Path:
        return self.path.with_name(f".{self.path.name}{STAMP_SUFFIX}")

    @property
    def log_path(self) -> Path:
        return cache_home() / "logs" / f"go-{self.name}.log"

    def install_args(self) -> list[str]:
        """``go`` arguments that build it into ``$GOBIN``."""
        flags = " ".join(("-s", "-w", *self.ldflags))
        return ["install", "-trimpath", f"-ldflags={flags}", f"{self.package}@v{self.version}"]

    def stamp_value(self) -> str:
        """Hash of what decides the binary: the package, its version, the build's flags and settings."""
        h = hashlib.sha256(" ".join(self.install_args()).encode())
        h.update(repr(sorted(BUILD_ENV.items())).encode())
        return h.hexdigest()

    def is_current(self) -> bool:
        """True when the binary is there, executable, and was built as ``install_args`` says now."""
        try:
            return (self.stamp_path.read_text().strip() == self.stamp_value() and self.path.is_file()
                    and os.access(self.path, os.X_OK))
        except OSError:
            return False

    def installed(self, say: Callable[[str], None] = print) -> Path:
        """The built binary, built on first use (``make setup-test`` builds it beforehand) with a
        progress line."""
        if not self.is_current():
            say(f"setup: building {self.label} ({self.purpose}) from the Go module proxy, once ...")
            t0 = time.monotonic()
            self.ensure()
            say(f"setup: {self.name} ready in {time.monotonic() - t0:.1f}s")
        return self.path

    def ensure(self, force: bool = False) -> tuple[Path, bool]:
        """Make ``path`` hold the binary; returns (its path, whether it was there)."""
        if not force and self.is_current():
            return self.path, True
        cache_home().mkdir(parents=True, exist_ok=True)
        # One build at a time: concurrent setups would race on the toolchain, the temp dirs and the rename.
        with (cache_home() / ".setup_go.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not force and self.is_current():  # another run built it while we waited
                return self.path, True
            return self._build_locked(), False

    def _build_locked(self) -> Path:
        """``go install`` into a temp dir, check the binary says its version, then rename it over ``path``."""
        go = go_for_build(self)
        final = self.path
        final.parent.mkdir(parents=True, exist_ok=True)
        for leftover in final.parent.glob(f".{self.name}.tmp-*"):  # from a run that was killed
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = final.parent / f".{self.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        log = self.log_path
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            cmd = [go, *self.install_args()]
            with log.open("w") as fh:
                fh.write("$ " + " ".join(cmd) + "\n")
                fh.flush()
                rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=go_env(tmp), cwd=tmp).returncode
            built = tmp / self.name
            if rc != 0 or not built.is_file():
                what = f"go exited with {rc}" if rc != 0 else f"go left no {built.name} in GOBIN"
                raise SetupError(f"could not build {self.label} with {go} ({what})\n"
                                 f"  $ {' '.join(cmd)}\n  last lines of {log}:\n{_tail(log)}")
            check = subprocess.run([str(built), "--version"], capture_output=True, text=True, timeout=60,
                                   stdin=subprocess.DEVNULL)
            said = check.stdout + check.stderr
            if check.returncode != 0 or not re.search(rf"\bv?{re.escape(self.version)}\b", said):
                raise SetupError(f"the {self.label} just built does not run or says another version ({built} "
                                 f"--version exited with {check.returncode}): {said.strip()[-500:]}")
            # The binary first, then its stamp: a crash between the two leaves a binary whose stamp
            # does not match (built again next time), never a stamp vouching for another binary.
            os.replace(built, final)
            stamp_tmp = tmp / "stamp"
            stamp_tmp.write_text(self.stamp_value() + "\n")
            os.replace(stamp_tmp, self.stamp_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def main(self, argv: list[str] | None = None, prog: str | None = None) -> int:
        """``python -m <module>``: build it (a no-op when built), one line of outcome."""
        ap = argparse.ArgumentParser(prog=prog, description=f"Build {self.label} ({self.purpose}) from the Go "
                                                            "module proxy into the cache.")
        ap.add_argument("--force", action="store_true", help="build again even when the stamp matches")
        args = ap.parse_args(argv)
        t0 = time.monotonic()
        try:
            path, cached = self.ensure(force=args.force)
        except SetupError as e:
            print(f"{self.label}: FAILED: {e}", file=sys.stderr)
            return 1
        if cached:
            print(f"{self.label}: ok (already built)")
        else:
            print(f"{self.label}: ok ({path.stat().st_size / 1e6:.1f} MB, built in {time.monotonic() - t0:.1f} s) "
                  f"-> {path}")
        return 0


def go_env(tmp: Path) -> dict[str, str]:
    """The environment of a build in ``tmp``: Go's trees under the cache (the build cache in
    ``tmp``, deleted with it: hundreds of MB, of use to a rebuild only), the binary into ``tmp``,
    this Go only (no switch to another toolchain on its own: which Go builds is decided here)."""
    home = go_home()
    return {**os.environ, "GOPATH": str(home), "GOMODCACHE": str(home / "pkg" / "mod"),
            "GOCACHE": str(tmp / "cache"), "GOBIN": str(tmp), "GOTOOLCHAIN": "local", **BUILD_ENV}


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "    (no log)"


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


def find_go(min_go: tuple[int, int] = (1, 25)) -> tuple[str | None, list[str]]:
    """The first Go of ``go_candidates`` at least ``min_go``, and what was found too old or broken."""
    rejected = []
    for go in go_candidates():
        v = go_version(go)
        if v is not None and v >= min_go:
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


def go_for_build(binary: GoBinary | None = None) -> str:
    """A Go recent enough for ``binary`` (any Go 1.25+ without one): one found here, else the
    toolchain fetched from the proxy."""
    min_go = binary.min_go if binary is not None else (1, 25)
    go, rejected = find_go(min_go)
    if go is not None:
        return go
    url = toolchain_url()
    try:
        return fetch_toolchain(url)
    except SetupError as e:
        looked = ", ".join(rejected) or "none on PATH" + "".join(f" or at {p}" for p in GO_LOCATIONS)
        what = f" to build {binary.label}" if binary is not None else ""
        raise SetupError(f"no Go {min_go[0]}.{min_go[1]}+{what} (found: {looked}), and {e}\n"
                         "  install Go from https://go.dev/dl/ (or put it on PATH), or allow HTTPS to "
                         f"{PROXY}") from None
