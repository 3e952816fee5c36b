"""Protocols defined outside fedhh, made known to every process of a Flower run.

A protocol registers its spec when its module is imported
(``fedhh.protocols.register_protocol``).  The ServerApp and the ClientApps
run in other processes (Ray actors, SuperNodes), so the run config names
that module under ``protocol-module`` and each app imports it before it
reads the fedhh config; the built-in protocols need no such key.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from fedhh.config import ConfigError

PROTOCOL_MODULE = "protocol-module"


def load_protocol_module(run_config: Mapping[str, Any]) -> None:
    """Import the module the run config names under ``protocol-module``, if any."""
    module = run_config.get(PROTOCOL_MODULE, "")
    if not isinstance(module, str):
        raise ConfigError(f"{PROTOCOL_MODULE}: expected a module name, got {module!r}")
    if not module:
        return
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise ConfigError(
            f"{PROTOCOL_MODULE}: cannot import {module!r} ({error}); it must be importable on the "
            "server and on every node"
        ) from None
