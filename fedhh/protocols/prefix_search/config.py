"""A config's ``[protocol]`` section as the parameters of a prefix search (PEM, TreeHist).

The variants of the family read the same keys and differ in their defaults
(the ``auto`` values and ``segment_length = 0``), which each declares in its
:class:`~fedhh.protocols.prefix_search.search.PrefixVariant`: PEM uses OLH, top-k
selection and the optimizer of [Wang19] §IV-C for γ, η and the group split;
TreeHist uses its count sketch of Hadamard bits, threshold pruning and one
unit per level from γ = 0.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...data.items import ItemCodec
from ...oracles.count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from ...oracles.count_sketch_hadamard import auto_sketch_shape
from ...oracles.registry import ORACLE_NAMES
from ...postprocess import POSTPROCESSORS
from ...schema import ConfigSection, Key
from ..common.keys import TOP_K_KEY
from ..common.prefix_encoding import PrefixEncoding, ValueSpace
from .oracles import AUTO
from .pem_assumptions import DEFAULT_DISTINCT_VALUES, DEFAULT_ZIPF_EXPONENT
from .search import ORACLE_PURPOSE, PrefixVariant, SearchParameters, level_shares, public_seed, uniform_segments


# The [protocol] keys of a prefix search, declared once for both variants.
@dataclass(frozen=True)
class PrefixKeys(ConfigSection):
    """The ``[protocol]`` keys of a prefix search, declared once for both variants."""

    encoding: Literal["bits", "symbols"] = Key(
        str,
        "bits",
        "PEM/TreeHist: values as bit strings (character codes) or as the codec's symbols",
        ("bits", "symbols"),
    ).field()
    oracle: str = Key(
        str,
        "auto",
        "PEM/TreeHist: frequency oracle of every level (auto: PEM olh, TreeHist count-sketch-hadamard)",
        ("auto", *ORACLE_NAMES),
    ).field()
    start_length: int = Key(
        int,
        0,
        "PEM/TreeHist: γ, units the first level adds to its segment (used when segment_length > 0)",
        check=lambda v: v >= 0,
        constraint=">= 0",
    ).field()
    segment_length: int = Key(
        int,
        0,
        "PEM/TreeHist: η, units each level adds; 0: PEM's optimizer chooses γ, η and the group split, "
        "TreeHist scans one unit per level",
        check=lambda v: v >= 0,
        constraint=">= 0 (0: automatic)",
    ).field()
    candidates_per_step: int = Key(
        int, 32, "PEM/TreeHist: |C_i|, prefixes kept per level", check=lambda v: v >= 1, constraint=">= 1"
    ).field()
    top_k: int = TOP_K_KEY.field()
    selection: str = Key(
        str,
        "auto",
        "PEM/TreeHist: survivors of a level (auto: PEM top-k, TreeHist threshold)",
        ("auto", "top-k", "threshold"),
    ).field()
    threshold: float = Key(
        float,
        0.0,
        "PEM/TreeHist: frequency (share of users) a prefix needs under threshold selection; 0: the noise level",
        check=lambda v: 0 <= v <= 1,
        constraint="in [0, 1]",
    ).field()
    postprocess: str = Key(
        str, "base-pos", "PEM/TreeHist: consistency post-processing of the reported counts", tuple(POSTPROCESSORS)
    ).field()
    collection: str = Key(
        str,
        "interactive",
        "PEM/TreeHist: one level per round, or every report in one round",
        ("interactive", "one-shot"),
    ).field()
    query_limit: int = Key(
        int,
        1_048_576,
        "PEM optimizer: most frequency-oracle queries over all levels",
        check=lambda v: v >= 1,
        constraint=">= 1",
    ).field()
    sketch_rows: int = Key(
        int,
        0,
        "PEM/TreeHist sketch oracles: rows (TreeHist: hash pairs t); 0: automatic",
        check=lambda v: v >= 0,
        constraint=">= 0",
    ).field()
    sketch_width: int = Key(
        int,
        0,
        "PEM/TreeHist sketch oracles: width (TreeHist: m, a power of two); 0: automatic",
        check=lambda v: v >= 0,
        constraint=">= 0",
    ).field()


PREFIX_KEYS: dict[str, Key] = PrefixKeys.keys()


def search_parameters(
    variant: PrefixVariant, protocol: Mapping[str, Any], epsilon: float, n_users: int, codec: ItemCodec, seed: int
) -> SearchParameters:
    """A config's ``[protocol]`` section as the search parameters of ``variant``.

    ``auto`` and ``segment_length = 0`` take the variant's defaults; a
    ``default_segment`` of ``None`` asks the PEM optimizer.
    """
    # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    variant.budget.split(variant.name, epsilon)
    keys = PrefixKeys.of(protocol)
    oracle = variant.default_oracle if keys.oracle == AUTO else keys.oracle
    selection = variant.default_selection if keys.selection == AUTO else keys.selection
    encoding = PrefixEncoding(keys.encoding, codec)
    rows, width = keys.sketch_rows, keys.sketch_width
    if oracle == COUNT_SKETCH_HADAMARD:
        auto_rows, auto_width = auto_sketch_shape(n_users)
        rows, width = rows or auto_rows, width or auto_width
    if keys.segment_length > 0:
        start = keys.start_length
        segments = uniform_segments(encoding.length, start, keys.segment_length)
        shares = level_shares(len(segments))
    elif variant.default_segment is not None:
        start, segments = 0, uniform_segments(encoding.length, 0, variant.default_segment)
        shares = level_shares(len(segments))
    else:
        start, segments, shares = optimized_design(
            encoding.space,
            n_users,
            epsilon,
            keys.top_k,
            oracle,
            public_seed(seed, ORACLE_PURPOSE),
            keys.query_limit,
            keys.candidates_per_step,
        )
    return SearchParameters(
        protocol=variant.name,
        n_users=n_users,
        epsilon=epsilon,
        encoding=encoding.kind,
        start_length=start,
        segment_lengths=segments,
        shares=shares,
        oracle=oracle,
        candidates_per_step=keys.candidates_per_step,
        top_k=keys.top_k,
        selection=selection,
        threshold=keys.threshold,
        postprocess=keys.postprocess,
        collection=keys.collection,
        sketch_rows=rows,
        sketch_width=width,
    )


@functools.lru_cache(maxsize=8)
def optimized_design(
    space: ValueSpace,
    n_users: int,
    epsilon: float,
    top_k: int,
    oracle: str,
    oracle_seed: int,
    query_limit: int,
    candidates: int,
) -> tuple[int, tuple[int, ...], tuple[float, ...]]:
    """PEM's optimizer ([Wang19] §IV-C): (γ, segment lengths, group shares).

    Cached: every server of one experiment (the privacy check when the run is
    set up, then the server that runs it) asks for the same design, which
    takes up to a second to find.
    """
    # imported here: the analysis loads scipy, which devices importing this module never need
    from .pem_analysis import UtilityModel, optimize_pem, zipf_frequencies

    model = UtilityModel(
        space,
        n_users,
        epsilon,
        top_k,
        oracle,
        zipf_frequencies(DEFAULT_ZIPF_EXPONENT, max(DEFAULT_DISTINCT_VALUES, top_k)),
        oracle_seed=oracle_seed,
    )
    design = optimize_pem(model, query_limit, candidates).design
    return design.start_length, design.segment_lengths, design.shares
