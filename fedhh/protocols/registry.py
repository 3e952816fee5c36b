"""The registered protocols, by name: one :class:`~fedhh.protocols.spec.ProtocolSpec` each.

A protocol module registers its spec once, when it is imported
(``SPEC = register_protocol(ProtocolSpec(...))``); the built-in ones are
imported by the package (``fedhh/protocols/__init__.py``), which then
imports every module an installed distribution names in the
:data:`PLUGIN_GROUP` entry-point group (:func:`load_plugins`).  A protocol
defined elsewhere (a plugin, a module named by ``--protocol-module``, a
test) registers the same way; a transport that runs in other processes
imports the module that registered it (:func:`protocol_module`, the Flower
app's ``protocol-module`` key), so every process knows the same protocols.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from typing import Any, TypeVar

from ..errors import InputError, one_line
from ..privacy.ldp import BudgetSplit
from ..schema import Key
from .spec import ProtocolSpec

PROTOCOLS: dict[str, ProtocolSpec[Any, Any, Any]] = {}
_MODULES: dict[str, str] = {}  # protocol name -> the module that registered it
BUILTIN_PACKAGE = __name__.rpartition(".")[0]  # fedhh.protocols
PLUGIN_GROUP = "fedhh.protocols"  # entry points naming modules that register protocols
SpecT = TypeVar("SpecT", bound=ProtocolSpec[Any, Any, Any])


def register_protocol(spec: SpecT, module: str | None = None) -> SpecT:
    """Make ``spec`` selectable as ``protocol.name``; returns it.

    ``module`` is the importable module that registers it (default: the
    caller's), which other processes of a run import to know it too.  A
    name registered twice, or a config key declared differently by two
    protocols, is refused.
    """
    if spec.name in PROTOCOLS:
        raise InputError(f"protocol.name: a protocol named {spec.name!r} is already registered")
    for key, declared in spec.keys.items():
        for other in PROTOCOLS.values():
            if key in other.keys and other.keys[key] != declared:
                raise InputError(
                    f"protocol.{key}: {spec.name!r} declares it differently from {other.name!r}; "
                    "protocols that share a key must share its declaration"
                )
    PROTOCOLS[spec.name] = spec
    _MODULES[spec.name] = module if module is not None else sys._getframe(1).f_globals["__name__"]
    return spec


def import_protocol_module(module: str, source: str = "--protocol-module") -> None:
    """Import ``module``, which registers protocols defined outside fedhh; any failure is an
    :class:`~fedhh.errors.InputError` naming ``source`` (what named the module) and the module."""
    try:
        importlib.import_module(module)
    except Exception as error:  # the module's own failure, whatever it is, is the plugin's
        cause = str(error) if isinstance(error, (InputError, ImportError)) else f"{type(error).__name__}: {error}"
        raise InputError(f"{source}: cannot import {module!r} ({one_line(cause)})") from error


def load_plugins() -> None:
    """Import the module of every entry point of the :data:`PLUGIN_GROUP` group that an installed
    distribution declares (in its ``entry_points.txt``: ``[fedhh.protocols]`` then ``NAME = MODULE``);
    each module registers its protocols.  A module that cannot be imported is an
    :class:`~fedhh.errors.InputError` naming the entry point and its distribution."""
    for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        dist = f", distribution {entry.dist.name} {entry.dist.version}" if entry.dist is not None else ""
        import_protocol_module(entry.module, f"protocol plugin {entry.name!r} ({PLUGIN_GROUP} entry point{dist})")


def get_protocol(name: str) -> ProtocolSpec[Any, Any, Any]:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise InputError(f"protocol.name: got {name!r}; allowed: {list(PROTOCOLS)}") from None


def protocol_module(name: str) -> str:
    """The module that registers protocol ``name`` (empty for a built-in one: always loaded)."""
    module = _MODULES[get_protocol(name).name]
    return "" if module.startswith(BUILTIN_PACKAGE + ".") else module


def protocol_keys(builtin_only: bool = False) -> dict[str, Key]:
    """Every registered protocol's own ``[protocol]`` keys, in registration order (shared
    keys once); ``builtin_only``: those of the protocols that ship with fedhh."""
    keys: dict[str, Key] = {}
    for name, spec in PROTOCOLS.items():
        if not builtin_only or not protocol_module(name):
            keys.update(spec.keys)
    return keys


def protocol_names(builtin_only: bool = False) -> tuple[str, ...]:
    return tuple(name for name in PROTOCOLS if not builtin_only or not protocol_module(name))


def split_budget(name: str, epsilon: float) -> BudgetSplit:
    """The per-report budgets of LDP protocol ``name`` for a per-user total ``epsilon``,
    by the rule its spec declares (``ProtocolSpec.budget``)."""
    spec = PROTOCOLS.get(name)
    if spec is None or spec.budget is None:
        allowed = sorted(other for other, declared in PROTOCOLS.items() if declared.budget is not None)
        raise InputError(f"protocol.name: no LDP budget split for {name!r}; allowed: {allowed}")
    return spec.budget.split(name, epsilon)


def plan(name: str, **target: Any) -> dict[str, Any]:
    """The plan of protocol ``name`` for ``target`` (keyword arguments of the planner its spec names:
    ``ProtocolSpec.planner``, behind ``fedhh plan NAME``)."""
    spec = PROTOCOLS.get(name)
    if spec is None or spec.planner is None:
        allowed = sorted(other for other, declared in PROTOCOLS.items() if declared.planner is not None)
        raise InputError(f"protocol.name: no planner for {name!r}; allowed: {allowed}")
    return spec.planner(**target)
