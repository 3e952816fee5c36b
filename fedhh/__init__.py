"""fedhh: federated heavy-hitter discovery with differential privacy.

The framework-free core: random kernels (``kernels``), items and populations
(``data``), frequency oracles, privacy accounting, protocols (server state
machines and vectorised client responses, one package each), configs and
metrics.
Transports live in ``strategies`` (Flower) and ``simulations`` (fast driver).
"""

__version__ = "0.2.0"
