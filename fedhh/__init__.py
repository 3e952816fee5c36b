"""fedhh: federated heavy-hitter discovery with differential privacy.

The framework-free core: random kernels (``kernels``), items and populations
(``data``), frequency oracles, privacy accounting, protocols (server state
machines and vectorised client responses, one package each), configs and
metrics.
Transports live in ``strategies`` (Flower) and ``simulations`` (fast driver).

The Python API is :data:`__all__` (:mod:`fedhh.api`): ``fedhh.run(config,
**overrides)`` returns a :class:`~fedhh.api.Result`, ``fedhh.load_sweep(DIR)``
a sweep's tables.  Its names are imported on first use, so ``import fedhh``
(and every command that imports a part of fedhh) loads nothing but this file.
"""

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .api import Config, InputError, Result, Sweep, load_config, load_sweep, run

__all__ = ["Config", "InputError", "Result", "Sweep", "__version__", "load_config", "load_sweep", "run"]


def __getattr__(name: str) -> Any:
    """The API's names, imported from :mod:`fedhh.api` when first used."""
    if name in __all__:
        from . import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fedhh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
