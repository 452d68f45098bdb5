"""Build, once, the wheels of the pinned packages PyPI serves only as source: ``make setup``.

``python setup/wheelhouse.py DIR NAME...``: for each NAME, the version requirements.txt pins;
a wheel of it is built into DIR (the cache, outside the repo) unless DIR has one. ``make setup``
then installs the pinned set with ``--find-links DIR``, and uv takes the wheel.

Why: pyspark and pyspark-client are published as source distributions only (455 MB for
pyspark), and the index here answers with no caching headers (no ETag, Last-Modified or
Cache-Control), so uv takes its cached download as stale: every fresh clone downloaded the
sdist again, rebuilt the wheel and kept both in uv's cache (13 GB of rebuilt sdists after a
day's clones). A wheel file in a find-links directory is a local file: uv unpacks it once and
links every later install to the same files. The same jars at the same modification time
are also what lets the Spark drivers' CDS archive serve every clone (loglake/local/cds.py).

Runs with the venv's own pip before anything of loglake is installed; standard library only.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"


def pins(names: list[str], requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """``{name: version}`` for each of ``names`` as requirements.txt pins it (``name==version``)."""

    found = {}
    for line in requirements.read_text().splitlines():
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+).*", line)
        if m:
            found[normalize(m[1])] = m[2]
    missing = [n for n in names if normalize(n) not in found]
    if missing:
        raise SystemExit(f"wheelhouse: {', '.join(missing)} not pinned (`name==version`) in {requirements}")
    return {n: found[normalize(n)] for n in names}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_of(directory: Path, name: str, version: str) -> Path | None:
    """The wheel of ``name`` ``version`` in ``directory`` (wheel file names use ``_`` for ``-``)."""

    stem = re.sub(r"[-_.]+", "_", name).lower()
    return next(iter(sorted(directory.glob(f"{stem}-{version}-*.whl"))), None)


def build(directory: Path, name: str, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=directory) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, f"{name}=={version}"],
                       check=True)
        built = wheel_of(Path(tmp), name, version)
        if built is None:
            raise SystemExit(f"wheelhouse: pip built no wheel of {name}=={version}")
        return built.replace(directory / built.name)  # whole or not at all


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit("usage: python setup/wheelhouse.py DIR NAME...")
    directory = Path(argv[0])
    for name, version in pins(argv[1:]).items():
        if wheel_of(directory, name, version) is None:
            print(f"wheelhouse: building {name}=={version} (once, into {directory})", flush=True)
            build(directory, name, version)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
