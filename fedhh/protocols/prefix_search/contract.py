"""The prefix family's part of the message contract: values as bits or symbols, and a level round's answer."""

from __future__ import annotations

import inspect

from ..common import prefix_encoding
from ..common.item_choice import ITEM_CHOICE_RULE
from ..spec import ContractText

LEVEL_ROUND = "Answering a PEM or TreeHist level round"

ANSWERING_A_LEVEL_ROUND = (
    "In mode `level` a request asks the users whose level is `level`, and only a node holding some of "
    "them receives it. Levels are public: user `u`'s level is the `i` with `level_bounds[i] <= U(u) < "
    "level_bounds[i+1]` (clipped to `0..levels-1`), where `U(u) = public_uniform(partition_seed, u)` "
    "(see Definitions). "
    "Each asked user takes its value's first `lengths[level]` units (a user without an item: the empty "
    "value, all units 0) and its key: the units' integer value, most significant unit first, when "
    "`B^length <= 2^64` (`B` = 2 for bits), else fedhh's 64-bit hash of the units "
    "(`key_rows`, see Definitions). It reports the key through the oracle `oracle` at ε = `epsilon`."
    "\n\n"
    "The reply: `sampled_users` = `responding_users` = the number of asked users the node holds "
    "(the server recomputes it from the levels and refuses any other number). For `olh` and `blh`, "
    "whose statistics are the reports themselves, `counts[j]` is how many of the node's reports "
    "support `candidates[j]` (the report's hash of the candidate is its reported bucket) and "
    "`reporters` = `[number of reports]`; since the node counts the supports itself, it may use any "
    "hash family, drawn fresh per report from its own randomness (OLH: `g = round(e^ε) + 1` buckets, "
    "the true bucket kept with probability `e^ε / (e^ε + g - 1)`, otherwise another bucket uniformly). "
    "For the other oracles `counts` and `reporters` are the oracle's flat statistics (or, for an oracle "
    "without a flat form that small, its support counts), which the server decodes with fedhh's public "
    "hash functions seeded by `oracle_seed`: see the next section for every oracle's randomizer, hashing "
    "and statistics. Except for `cms` (a sketch of unary rows): when the request has fewer candidates "
    "than the sketch's width (its support counts, `k C`, are then fewer than its flat cells, `k m`), "
    "`counts` and `reporters` are the candidates' support counts (`counts[j C + i]` the row-`j` reports "
    "with the bit of row `j`'s symbol of `candidates[i]` set, `reporters[j]` the row-`j` reports), "
    "which are all the server reads of the flat cells. In mode `final` (TreeHist) every user of the node "
    "reports its whole value's key (all units, whatever `lengths` says) at ε = `final_epsilon`, and the node "
    "answers the same way. The oracle of a level is the one `oracle` names at ε = `epsilon` "
    "over `d = min(B^length, 2^64)` values, with option `seed` = `oracle_seed`, and `rows` = "
    "`sketch_rows` and `width` = `sketch_width` when these are not 0, for the oracles that take "
    "these options (`fedhh.protocols.prefix_search.oracles.build_level_oracle`); every other option keeps "
    "its default. In mode `collect` a node sends, for each of its users (every level's), the row "
    "`[level, the level report's "
    "columns..., the full-value report's columns...]` (the latter only when `final_epsilon > 0`), every "
    "column as uint64, as `report_rows` (the distinct rows, sorted) with `report_counts` (how many users "
    "sent each)."
)


def sections() -> list[tuple[str, str]]:
    """How values become units (the prefix encoding's description) and how a node answers a level round."""
    return [
        ("Values as bits or symbols (PEM, TreeHist)", inspect.cleandoc(prefix_encoding.__doc__ or "")),
        (LEVEL_ROUND, ANSWERING_A_LEVEL_ROUND),
    ]


CONTRACT = ContractText(
    definitions=(ITEM_CHOICE_RULE,),
    sections=sections,
    oracle_notes=(
        f"a PEM or TreeHist round with `cms` also sends the support counts when they are fewer than the flat "
        f'cells (see "{LEVEL_ROUND}")',
    ),
)
