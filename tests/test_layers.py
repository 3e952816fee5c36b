"""Imports point down only: simulations -> strategies -> fedhh.

Read from the source (every ``import`` and ``from ... import`` statement,
at module level or inside a function, since a lazy import is still an
upward dependency), so a forbidden import fails here even where no test
happens to run the line that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The top-level packages ``path`` imports (absolute imports; relative ones stay in its package), with
    the line of each import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def upward_imports(package: str, above: tuple[str, ...]) -> list[str]:
    """``file:line imports name`` for every import in ``package`` of a package in ``above``."""
    return sorted(
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in (ROOT / package).rglob("*.py")
        for name, line in imported_packages(path)
        if name in above
    )


def test_the_reader_sees_lazy_and_dotted_imports(tmp_path: Path) -> None:
    """The check itself can fail: a function-level ``from simulations.x import y`` and a plain
    ``import strategies.codec`` are both seen; a relative import is not a package's."""
    module = tmp_path / "module.py"
    module.write_text(
        "import os\nfrom . import sibling\n\n"
        "def late():\n    from simulations.run import run_experiment\n    import strategies.codec\n"
    )
    assert imported_packages(module) == {("os", 1), ("simulations", 5), ("strategies", 6)}


@pytest.mark.parametrize(("package", "above"), [("fedhh", ("simulations", "strategies")), ("strategies", ("simulations",))])
def test_a_layer_imports_nothing_above_it(package: str, above: tuple[str, ...]) -> None:
    assert upward_imports(package, above) == []
