"""The package type-checks with mypy --strict, and parses as Python 3.9."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]
SOURCES = sorted((PKG / "src" / "chime_consumer").rglob("*.py"))


def test_mypy_strict_passes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src/chime_consumer"],
        cwd=PKG, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_sources_parse_as_python_3_9() -> None:
    assert len(SOURCES) > 10
    for source in SOURCES:
        ast.parse(source.read_text(), filename=str(source), feature_version=(3, 9))


def test_the_package_is_marked_typed() -> None:
    assert (PKG / "src" / "chime_consumer" / "py.typed").exists()
