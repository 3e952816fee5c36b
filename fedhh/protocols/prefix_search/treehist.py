"""TreeHist (Bassily, Nissim, Stemmer and Thakurta; [Bassily17] §3), and its generic form ([Cormode21] §5).

Every user is assigned, by public randomness, one level of the prefix tree
and spends half of its budget on one report of its value's prefix at that
level and the other half on one report of its whole value.  The server
scans the levels top-down: at each level it estimates the children of the
surviving nodes with that level's reports and prunes every node estimated
below the threshold (a node that is not frequent has no frequent
descendant).  After the last level it estimates the survivors once more
with everyone's full-value reports, which come from all ``n`` users rather
than the ``n / L`` of one level, so the reported counts are far more
accurate (the final estimation phase of §3.3).

The paper's instance scans a binary tree one bit per level with its count
sketch of Hadamard bits (``count-sketch-hadamard``, :mod:`fedhh.oracles.count_sketch_hadamard`:
``t`` hash pairs, users split over (level, hash), median over hashes).  The
generic hierarchical variant of the survey uses any oracle at each level
and any segment length; both are this protocol with other ``[protocol]``
keys.  Threshold selection is the default; ``protocol.threshold = 0`` sets
it at the noise level, so that about one absent node per level survives
(the ``η`` of Theorem 3.2 grows the same way, with
``sqrt(n log(n/β) log d) / ε``).  All the rest is the family's
(:mod:`fedhh.protocols.prefix_search.family`).
"""

from __future__ import annotations

from ...oracles.count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from ...privacy.ldp import BudgetRule
from ..registry import register_protocol
from .family import prefix_search_spec
from .search import THRESHOLD, PrefixSearchServer, PrefixVariant
from .sizing import TREEHIST_SIZING
from .treehist_plan import TREEHIST_PLAN, plan_treehist

PAPER_SEGMENT = 1  # one unit per level: the binary prefix tree for bit values

TREEHIST = PrefixVariant(
    name="treehist",
    summary=(
        "TreeHist (Bassily et al.): a prefix tree scanned level by level with ε-LDP reports, then a final "
        "estimation pass"
    ),
    final_pass=True,  # the survivors are estimated from everyone's full-value reports
    default_oracle=COUNT_SKETCH_HADAMARD,
    default_selection=THRESHOLD,
    default_segment=PAPER_SEGMENT,
    budget=BudgetRule(
        (("prefix at a uniformly chosen level", 0.5), ("full string", 0.5)),
        "Bassily et al., Practical Locally Private Heavy Hitters (TreeHist); even split as in Cormode et al.'s survey",
    ),
    planner=plan_treehist,
    plan_command=TREEHIST_PLAN,
    sizing=TREEHIST_SIZING,
)


class TreeHistServer(PrefixSearchServer):
    """TreeHist's server: threshold-pruned levels, then the final estimation pass."""

    variant = TREEHIST


SPEC = register_protocol(prefix_search_spec(TreeHistServer))
