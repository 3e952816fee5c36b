"""The prefix-search family: PEM and TreeHist, frequency oracles on prefixes of increasing length.

[Cormode21] §5 groups them as one protocol: each level asks a share of the
users for a prefix of their value through an ε-LDP frequency oracle and
queries only the extensions of the previous level's survivors.  The family's
parts: its ``[protocol]`` keys and their reading (``config``), messages and
device side (``reports``, with the one-shot ``report_table``), the level
oracles (``oracles``), the server (``search``), what an untrusting server
checks (``nodes``), the spec builder (``family``), the two variants (``pem``,
``treehist``), the analyses (``selection_model``, ``item_discovery``,
``pem_analysis``), the planners and sizing (``pem_plan``, ``treehist_plan``,
``sizing``), the bits a user sends (``wire``) and the contract's prose
(``contract``).  Importing the package registers PEM, then TreeHist.
"""

from . import pem, treehist  # noqa: F401  (registers the variants, in this order)
