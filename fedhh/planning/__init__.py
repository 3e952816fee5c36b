"""What every protocol's planning tools share: ``fedhh plan NAME`` declared as data
(:mod:`fedhh.planning.commands`), the item shares a plan reports on (:mod:`fedhh.planning.plan`),
and the search for the population a deployment needs (:mod:`fedhh.planning.sizing`, ``fedhh size``).

Each protocol's planner and sizing live in its own package and its spec
holds them (:class:`fedhh.protocols.ProtocolSpec`); nothing here knows a
protocol, so the protocols build on it.
"""
