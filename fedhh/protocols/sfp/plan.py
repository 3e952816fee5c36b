"""``fedhh plan sfp``: the budget split, positions and the noise of the fragment and word counts."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

from ...data.items import ItemCodec, get_alphabet
from ...planning.commands import Option, ldp_plan_command
from ...privacy.ldp import ldp_report
from ...privacy.validation import check_users
from .analysis import fragment_pairs, fragment_positions, sfp_split, sketch_noise
from .parameters import NAME


def plan_sfp(
    n_users: int,
    epsilon: float,
    max_length: int = 10,
    unit_size: int = 1,
    alphabet: str = "lowercase",
    fragment_length: int = 2,
    fragment_share: float = 0.5,
    word_pass: bool = True,
    oracle: str = "cms",
    rows: int = 16,
    width: int = 1024,
) -> dict[str, Any]:
    """The split, the positions, and the noise of a fragment's and a word's count estimate (the
    sketches' randomisation noise, collisions left out) for a target ε."""
    check_users(n_users)
    codec = ItemCodec(get_alphabet(alphabet), unit_size, max_length)
    positions = fragment_positions(codec, fragment_length)
    pairs = fragment_pairs(codec, fragment_length)
    split = sfp_split(epsilon, fragment_share=fragment_share, word_pass=word_pass)
    noise = {
        name: math.sqrt(sketch_noise(oracle, part, rows, width, n_users / (positions if i == 0 else 1)))
        * (positions if i == 0 else 1)
        for i, (name, part) in enumerate(split.parts)
    }
    z = NormalDist().inv_cdf(1 - 1 / pairs)
    return {
        "protocol": NAME,
        "n_users": n_users,
        "epsilon": split.epsilon,
        "positions": positions,
        "fragment_length": fragment_length,
        "pairs_per_position": pairs,
        "count_standard_deviation": noise,
        "fragment_threshold_count": z * noise[split.parts[0][0]],
        "privacy": ldp_report(split, oracle, {"positions": positions}).to_dict(),
    }


SFP_PLAN = ldp_plan_command(
    NAME,
    "SFP's budget split, fragment positions and count noise from (n, ε)",
    plan_sfp,
    [
        Option("--max-length", "characters of the longest item", int, 10, "max_length"),
        Option("--fragment-length", "symbols per fragment", int, 2, "fragment_length"),
        Option("--fragment-share", "share of ε on the fragment report", float, 0.5, "fragment_share"),
        Option("--oracle", "sketch oracle: cms or hcms", str, "cms", "oracle"),
        Option("--rows", "sketch rows", int, 16, "rows"),
        Option("--width", "sketch width", int, 1024, "width"),
    ],
)
