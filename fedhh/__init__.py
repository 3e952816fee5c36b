"""fedhh: federated heavy-hitter discovery with differential privacy.

The framework-free core: items and populations, protocols (server state
machines and vectorised client responses), privacy accounting and metrics.
Transports live in ``strategies`` (Flower) and ``simulations`` (fast driver).
"""

__version__ = "0.2.0"
