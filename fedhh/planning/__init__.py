"""Tools above the protocols: parameters from a privacy target (``fedhh plan``) and the
population a deployment needs (``fedhh size``).

Each protocol names its planner and its sizing on its spec
(:class:`fedhh.protocols.ProtocolSpec`), by reference, so the protocols
import none of this; the privacy accounting these tools report with is
:mod:`fedhh.privacy`.
"""
