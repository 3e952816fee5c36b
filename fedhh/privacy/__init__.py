"""Privacy accounting: the guarantee of a run, its composition over runs, and the ledger.

Below the protocols (they report with it) and above nothing but the basics
and the oracles: no module here imports a protocol.  The protocols'
planners and sizing (in their packages) and the audits (:mod:`fedhh.audits`)
use protocols and accounting together.
"""
