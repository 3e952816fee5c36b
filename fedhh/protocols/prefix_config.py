"""A config's ``[protocol]`` section as the parameters of a prefix search (PEM, TreeHist).

The two protocols read the same keys and differ in their defaults (the
``auto`` values and ``segment_length = 0``): PEM uses OLH, top-k selection
and the optimizer of seed 000 §IV-C for γ, η and the group split; TreeHist
uses its count sketch of Hadamard bits, threshold pruning and one unit per
level from γ = 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..items import ItemCodec
from ..privacy.ldp import split_budget
from .count_sketch_hadamard import NAME as COUNT_SKETCH_HADAMARD
from .prefix_encoding import PrefixEncoding
from .prefix_oracles import AUTO, auto_sketch_shape
from .prefix_search import ORACLE_PURPOSE, SearchParameters, level_shares, public_seed, uniform_segments


def search_parameters(
    protocol_name: str,
    protocol: Mapping[str, Any],
    epsilon: float,
    n_users: int,
    codec: ItemCodec,
    seed: int,
    default_oracle: str,
    default_selection: str,
    default_segment: int | None,
) -> SearchParameters:
    """A config's ``[protocol]`` section as search parameters (shared by PEM and TreeHist).

    ``default_segment`` is the segment length used when ``segment_length = 0``
    (TreeHist: one unit per level from γ = 0); ``None`` asks the PEM optimizer.
    """
    split_budget(protocol_name, epsilon)  # refuses a per-user ε no report's oracle can take, naming privacy.epsilon
    oracle = default_oracle if protocol["oracle"] == AUTO else str(protocol["oracle"])
    selection = default_selection if protocol["selection"] == AUTO else str(protocol["selection"])
    encoding = PrefixEncoding(protocol["encoding"], codec)
    rows, width = int(protocol["sketch_rows"]), int(protocol["sketch_width"])
    if oracle == COUNT_SKETCH_HADAMARD:
        auto_rows, auto_width = auto_sketch_shape(n_users)
        rows, width = rows or auto_rows, width or auto_width
    candidates = int(protocol["candidates_per_step"])
    top_k = int(protocol["top_k"])
    segment = int(protocol["segment_length"])
    if segment > 0:
        start = int(protocol["start_length"])
        segments = uniform_segments(encoding.length, start, segment)
        shares = level_shares(len(segments))
    elif default_segment is not None:
        start, segments = 0, uniform_segments(encoding.length, 0, default_segment)
        shares = level_shares(len(segments))
    else:
        # imported here: the analysis loads scipy, which devices importing this module never need
        from .pem_analysis import (
            DEFAULT_DISTINCT_VALUES,
            DEFAULT_ZIPF_EXPONENT,
            UtilityModel,
            optimize_pem,
            zipf_frequencies,
        )

        model = UtilityModel(
            encoding.space, n_users, epsilon, top_k, oracle,
            zipf_frequencies(DEFAULT_ZIPF_EXPONENT, max(DEFAULT_DISTINCT_VALUES, top_k)),
            oracle_seed=public_seed(seed, ORACLE_PURPOSE),
        )
        design = optimize_pem(model, int(protocol["query_limit"]), candidates).design
        start, segments, shares = design.start_length, design.segment_lengths, design.shares
    return SearchParameters(
        protocol=protocol_name,
        n_users=n_users,
        epsilon=epsilon,
        encoding=encoding.kind,
        start_length=start,
        segment_lengths=segments,
        shares=shares,
        oracle=oracle,
        candidates_per_step=candidates,
        top_k=top_k,
        selection=selection,
        threshold=float(protocol["threshold"]),
        postprocess=str(protocol["postprocess"]),
        collection=str(protocol["collection"]),
        sketch_rows=rows,
        sketch_width=width,
    )
