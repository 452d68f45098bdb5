"""The manual builds and the front door stays short: README.md and docs/ (MkDocs, strict)."""

import re
import subprocess
import sys
from pathlib import Path

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
