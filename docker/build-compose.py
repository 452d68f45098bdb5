"""Build Docker Compose v2 (the `docker compose` users run) from the Go module proxy.

    python docker/build-compose.py            # prints the binary's path; a no-op when built

Debian bookworm packages only the old Python docker-compose 1.29 (no Compose Specification
`configs`/`secrets` semantics of v2, no `service_completed_successfully` with `--wait`), and
no image registry may answer, so Compose is built here from its module
``github.com/docker/compose/v2`` at ``VERSION`` into ``<cache>/docker/cli-plugins/docker-compose``
(``$LOGLAKE_CACHE`` or ~/.cache/loglake): a static binary that runs both as a plugin
(``DOCKER_CONFIG=<cache>/docker docker compose …``) and standalone (``docker-compose …``).

The Go is the one loglake's setup uses for versitygw and statsd_exporter
(``loglake.local.gobuild.go_for_build``: Go on PATH or /usr/local/go, else the toolchain from
the proxy); Go's trees stay under
``<cache>/go``. A stamp beside the binary holds the build's arguments: repeated runs are no-ops.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "2.40.3"
MODULE = "github.com/docker/compose/v2"
# Compose's own Makefile: the version into internal.Version, stripped, no cgo.
LDFLAGS = f"-s -w -X {MODULE}/internal.Version=v{VERSION}"
# -mod=readonly: Compose's own go.mod and go.sum as released (its go.mod has exclude directives,
# which `go install module@version` refuses: the module is downloaded and built in place).
BUILD_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -modcacherw", "GOTOOLCHAIN": "local"}
REPO = Path(__file__).resolve().parents[1]


def cache_home() -> Path:
    env = os.environ.get("LOGLAKE_CACHE")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "loglake"


def plugin_dir() -> Path:
    """``DOCKER_CONFIG`` of the stack's commands is its parent: the docker CLI finds the plugin there."""
    return cache_home() / "docker" / "cli-plugins"


def binary_path() -> Path:
    return plugin_dir() / "docker-compose"


def build_args(out: Path) -> list[str]:
    return ["build", "-trimpath", f"-ldflags={LDFLAGS}", "-o", str(out), "./cmd"]


def stamp_value() -> str:
    return hashlib.sha256((f"{MODULE}@v{VERSION} " + " ".join(build_args(Path("out"))) + repr(sorted(BUILD_ENV.items()))).encode()).hexdigest()


def stamp_path() -> Path:
    return plugin_dir() / ".docker-compose.stamp"


def is_current() -> bool:
    try:
        return stamp_path().read_text().strip() == stamp_value() and os.access(binary_path(), os.X_OK)
    except OSError:
        return False


def find_go() -> str:
    sys.path.insert(0, str(REPO))
    try:
        from loglake.local.gobuild import go_for_build
    except ImportError:  # no loglake venv: any Go 1.24+ (Compose 2.40's go.mod) on PATH or /usr/local/go
        for go in (shutil.which("go"), "/usr/local/go/bin/go"):
            if go and os.access(go, os.X_OK):
                return go
        sys.exit("build-compose: no Go found (put Go 1.24+ on PATH, or run `make setup` first)")
    return go_for_build()


def build() -> Path:
    go = find_go()
    final = binary_path()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".build-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    home = cache_home() / "go"
    env = {**os.environ, "GOPATH": str(home), "GOMODCACHE": str(home / "pkg" / "mod"),
           "GOCACHE": str(home / "build-cache"), **BUILD_ENV}
    log = cache_home() / "logs" / "go-compose.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    built = tmp / "docker-compose"
    try:
        with log.open("w") as fh:
            dl = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@v{VERSION}"], capture_output=True,
                                text=True, env=env, cwd=tmp, stdin=subprocess.DEVNULL)
            fh.write(dl.stdout + dl.stderr)
            source = json.loads(dl.stdout).get("Dir") if dl.returncode == 0 else None
            if not source:
                sys.exit(f"build-compose: `go mod download {MODULE}@v{VERSION}` failed; see {log}")
            fh.flush()
            rc = subprocess.run([go, *build_args(built)], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                cwd=source, stdin=subprocess.DEVNULL).returncode
        if rc != 0 or not built.is_file():
            sys.exit(f"build-compose: `{go} {' '.join(build_args(built))}` in {source} failed ({rc}); see {log}")
        out = subprocess.run([str(built), "version", "--short"], capture_output=True, text=True, timeout=60)
        if VERSION not in out.stdout:
            sys.exit(f"build-compose: the binary built says {out.stdout.strip() or out.stderr.strip()!r}")
        os.replace(built, final)
        stamp_path().write_text(stamp_value() + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main() -> int:
    path = binary_path() if is_current() else build()
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
