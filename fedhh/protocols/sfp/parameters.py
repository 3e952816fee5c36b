"""SFP's ``[protocol]`` keys and constants."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema import ConfigSection, Key
from ..common.report_mode import REPORT_KEY

NAME = "sfp"
POSITION_PURPOSE = "sfp.position"
ORACLE_PURPOSE = "sfp.oracle"
HASH_PURPOSE = "sfp.word-hash"
ITEM_PURPOSE = "sfp.item"
FRAGMENT_PURPOSE = "sfp.fragment-report"
WORD_PURPOSE = "sfp.word-report"
HASH_VALUES = 256  # Apple's 8-bit hash of the whole word
MAX_PAIRS = 1 << 22  # (fragment, hash) pairs a position may have: each is estimated
MAX_PUZZLE = 4096  # candidate words one hash value may assemble (the weakest fragments go first)
USERS_PER_BLOCK = 1 << 17  # a multiple of fedhh.kernels.randomness.GRID_USERS
SKETCH_ORACLES: tuple[str, ...] = ("cms", "hcms")


@dataclass(frozen=True)
class SFPKeys(ConfigSection):
    """SFP's own ``[protocol]`` keys."""

    fragment_length: int = Key(
        int,
        2,
        "SFP: symbols f of a fragment; must divide the item's symbols (max_length / unit_size)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    fragment_share: float = Key(
        float,
        0.5,
        "SFP: share of ε on the fragment report, the rest on the full word",
        check=lambda v: 0 < v < 1,
        constraint="in the open interval (0, 1)",
    ).field()
    word_pass: bool = Key(
        bool,
        True,
        "SFP: also report the whole word through a second sketch (the optional full-string pass); "
        "false: the fragment report takes the whole ε",
    ).field()
    fragment_candidates: int = Key(
        int,
        64,
        "SFP: (fragment, hash) pairs kept per position, the best above the noise level "
        "(protocol.report = top_k: the best whatever their noise)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    words_reported: int = Key(
        int,
        32,
        "SFP: most words reported, the best by the full-word estimate with a positive one "
        "(protocol.report = top_k: whatever their estimate)",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    fragment_oracle: str = Key(
        str, "cms", "SFP: sketch oracle of both reports (cms: count-mean over OUE; hcms: over HM(1))", SKETCH_ORACLES
    ).field()
    fragment_sketch_rows: int = Key(
        int, 16, "SFP: rows of both sketches", check=lambda v: 1 <= v <= 1 << 16, constraint="in 1..65536"
    ).field()
    fragment_sketch_width: int = Key(
        int, 1024, "SFP: width of both sketches", check=lambda v: 2 <= v <= 1 << 20, constraint="in 2..1048576"
    ).field()
    report: str = REPORT_KEY.field()  # shared with RAPPOR


SFP_KEYS: dict[str, Key] = SFPKeys.keys()
