"""The installed Flower is one that fedhh declares, and the docs name that same range.

The range is read from ``pyproject.toml`` (the one place it is written) and
compared with what is installed, with the requirement the installed fedhh
distribution carries (an environment installed from an older
``pyproject.toml`` fails here, not somewhere deep in a Flower run), with the
example app's own declaration, and with the text of the docs that tell users
which versions are tested.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOCS_NAMING_THE_RANGE = ("README.md", "docs/flower.md")
OTHER_APPS = ("examples/third_party_client/pyproject.toml",)


def flower_requirement(pyproject: Path) -> str:
    """The ``flwr`` requirement among ``pyproject``'s dependencies, as written there."""
    with open(pyproject, "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    (flower,) = [line for line in dependencies if Requirement(line).name == "flwr"]
    return str(flower)


WRITTEN = flower_requirement(ROOT / "pyproject.toml")
DECLARED = Requirement(WRITTEN)


def test_the_installed_flower_is_within_the_declared_range() -> None:
    installed = Version(importlib.metadata.version("flwr"))
    assert DECLARED.specifier.contains(installed), f"flwr {installed} is installed; fedhh declares {DECLARED}"
    assert "simulation" in DECLARED.extras


def test_the_installed_fedhh_declares_the_range_of_this_checkout() -> None:
    (carried,) = [
        Requirement(line) for line in importlib.metadata.requires("fedhh") or [] if Requirement(line).name == "flwr"
    ]
    assert carried.specifier == DECLARED.specifier, (
        f"the installed fedhh requires {carried}, this checkout {DECLARED}: reinstall it (pip install -e .)"
    )


def test_the_example_apps_declare_the_same_range() -> None:
    for app in OTHER_APPS:
        assert Requirement(flower_requirement(ROOT / app)) == DECLARED, app


def test_the_docs_name_the_declared_range() -> None:
    for doc in DOCS_NAMING_THE_RANGE:
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert WRITTEN in text, f"{doc} must name the declared Flower range {WRITTEN}"
