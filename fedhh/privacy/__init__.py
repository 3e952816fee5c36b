"""Privacy accounting: the guarantee of a run, its composition over runs, and the ledger.

Below the protocols (they report with it) and above nothing but the basics:
no module here imports a protocol.  The tools that use protocols and
accounting together -- planners, sizing, audits -- sit above both, in
:mod:`fedhh.planning` and :mod:`fedhh.audits`.
"""
