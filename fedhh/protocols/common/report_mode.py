"""What RAPPOR and SFP report: what clears their noise threshold, or their K best estimates.

By default both protocols report only what their server can tell from noise
(RAPPOR: the candidates significant after Bonferroni's correction; SFP: words
reassembled from fragments above the noise level, with a positive estimate),
so a small population yields fewer than K items, all of them likely right.
Reference implementations such as pure-ldp ([Cormode21]'s code) instead
report their K best estimates whatever their noise, and a utility measured at
a fixed K (F1@K, recall@K) compares the two fairly only if both report the
same way: ``protocol.report = "top_k"`` makes fedhh do so.

The choice is post-processing of the server's estimates: the users' reports,
and so the privacy guarantee, are the same in both modes.
"""

from __future__ import annotations

from ...errors import InputError
from ...schema import Key

SIGNIFICANT, TOP_K = "significant", "top_k"
REPORT_MODES: tuple[str, ...] = (SIGNIFICANT, TOP_K)

REPORT_KEY = Key(
    str,
    SIGNIFICANT,
    "RAPPOR/SFP: what is reported. significant: only what clears the protocol's noise threshold (RAPPOR: "
    "Bonferroni-significant candidates; SFP: fragments above the noise level, words with a positive estimate); "
    "top_k: the K best estimates whatever their noise, as pure-ldp reports (RAPPOR: K = protocol.top_k; SFP: "
    "protocol.fragment_candidates per position and K = protocol.words_reported words), for comparisons at a "
    "fixed K. Post-processing: the privacy guarantee is the same",
    REPORT_MODES,
)


def check_report_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`REPORT_MODES`, else an error naming ``protocol.report``."""
    if mode not in REPORT_MODES:
        raise InputError(f"protocol.report: got {mode!r}; allowed values: {list(REPORT_MODES)}")
    return mode
