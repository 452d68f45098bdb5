"""The manual builds and the front door stays short: README.md and docs/ (MkDocs, strict)."""

import re
import subprocess
import sys
from pathlib import Path

from tests.unit.test_docker_files import pom_version

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 300

# [text](target) and ![alt](target); the target ends at whitespace or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_the_manual_builds_in_strict_mode(tmp_path):
    """mkdocs.yml sets strict and link validation: a broken link or a page left out of the nav fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move the detail into docs/")


def test_readme_relative_links_name_existing_files():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    assert targets, "README.md links into docs/; found no relative link"
    missing = []
    for target in targets:
        path = target.split("#", 1)[0]
        if path and not (README.parent / path).exists():
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"


def _pin(package: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(rf"^{re.escape(package)}(?:\[[^\]]*\])?==(\S+)", line)
        if m:
            return m.group(1)
    raise AssertionError(f"requirements.txt pins no {package}")


def _pom_pin(kind: str, artifact: str) -> str:
    return pom_version(ROOT / "setup" / f"pom-{kind}.xml", artifact)


def test_readme_stack_line_names_the_pinned_versions():
    """The README's stack line and docs/stack.md's table say the versions setup installs."""
    line = next((x for x in README.read_text().splitlines() if x.startswith("Stack:")), None)
    assert line, "README.md has no 'Stack:' line"
    text = " ".join(README.read_text().split("Stack:", 1)[1].split("\n\n", 1)[0].split())
    stack = " ".join((ROOT / "docs" / "stack.md").read_text().split())
    want = {"Kafka": _pom_pin("kafka", "kafka_2.13"), "Spark": _pin("pyspark"),
            "Delta Lake": _pom_pin("spark", "delta-spark_2.13"), "Airflow": _pin("apache-airflow"),
            "Great Expectations": _pin("great-expectations")}
    assert _pin("pyspark") == _pin("pyspark-client") == _pom_pin("spark", "spark-sql-kafka-0-10_2.13")
    assert _pin("delta-spark") == want["Delta Lake"]
    for name, version in want.items():
        assert f"{name} {version}" in text, f"README's stack line says no '{name} {version}': {text}"
    for version in (want["Spark"], want["Delta Lake"], want["Kafka"]):
        assert version in stack, f"docs/stack.md does not name {version}"
