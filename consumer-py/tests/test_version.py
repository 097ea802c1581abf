"""The package is versioned with the Cargo workspace."""

from __future__ import annotations

import re
from pathlib import Path

import chime_consumer

PKG = Path(__file__).resolve().parents[1]


def _version_in(path: Path, section: str) -> str:
    text = path.read_text()
    block = text.split(f"[{section}]", 1)[1].split("\n[", 1)[0]
    match = re.search(r'^version\s*=\s*"([^"]+)"', block, re.MULTILINE)
    assert match, f"no version in [{section}] of {path}"
    return match.group(1)


def test_pyproject_package_and_workspace_versions_agree() -> None:
    workspace = _version_in(PKG.parent / "Cargo.toml", "workspace.package")
    assert _version_in(PKG / "pyproject.toml", "project") == workspace
    assert chime_consumer.__version__ == workspace


def test_presence_reports_the_library_and_its_version() -> None:
    from chime_consumer.replies import library_version

    reported = library_version()
    assert reported == f"chime-consumer-py/{chime_consumer.__version__}"
    # chimed keeps a version of at most 64 printable ASCII characters (docs/protocol.md).
    assert len(reported) <= 64 and reported.isascii() and reported.isprintable()
