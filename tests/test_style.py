"""The code's style is checked by tools: ``ruff check`` and ``mypy`` find nothing, ``ruff format`` changes nothing.

The tools read their settings from ``pyproject.toml`` (``[tool.ruff]``,
``[tool.mypy]``), which also names what they check (``fedhh/``,
``strategies/``, ``simulations/``), so the commands here are the ones a
contributor runs by hand.  A finding fails the test with the tool's own
report of it.  ruff and mypy are in the test extra (``pip install -e ".[test]"``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def test_ruff_finds_nothing() -> None:
    done = run_tool([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise"], timeout=120)
    assert done.returncode == 0, f"ruff check found:\n{done.stdout}{done.stderr}"


def test_ruff_format_changes_nothing() -> None:
    done = run_tool([sys.executable, "-m", "ruff", "format", "--check", "--no-cache"], timeout=120)
    assert done.returncode == 0, f"ruff format would reformat (run `ruff format`):\n{done.stdout}{done.stderr}"


@pytest.mark.timeout(900)
def test_mypy_finds_nothing(tmp_path: Path) -> None:
    # a cache of its own: the test neither reads a stale cache nor leaves one in the work tree
    done = run_tool([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")], timeout=840)
    assert done.returncode == 0, f"mypy found:\n{done.stdout}{done.stderr}"
