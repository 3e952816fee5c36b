"""A module imported aside: the module itself once imported, the import's error raised where it is needed."""

from __future__ import annotations

import sys

import pytest

from simulations.import_aside import ImportAside


def test_the_module_imported_aside_is_the_module() -> None:
    import json.decoder

    assert ImportAside("json.decoder").module() is json.decoder is sys.modules["json.decoder"]


def test_an_import_error_is_raised_by_whoever_asks_for_the_module() -> None:
    aside = ImportAside("simulations.no_such_module")
    with pytest.raises(ModuleNotFoundError, match="simulations.no_such_module"):
        aside.module()
