"""The frequency oracle each level of a prefix search uses, built the same on server and devices.

A level's oracle is fixed by public parameters only: its name, ε, the
domain of the level's prefixes, the seed of its public hash functions (FLH,
sketches) and the sketch shape.  Requests carry these, so a device rebuilds
exactly the oracle the server decodes with.  Every oracle of
:func:`fedhh.oracles.make_oracle` can serve a level; what the search needs
to know about one (the shape of its support counts, the most one report
adds to them) the oracle declares itself (:class:`fedhh.oracles.FrequencyOracle`).
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from ...errors import InputError
from ...oracles import FrequencyOracle, Support, make_oracle
from ...oracles.registry import ORACLE_BUILDERS, ORACLE_NAMES
from ...oracles.sketches import SketchOracle
from ...oracles.unary import SPARSE_MAX_Q, UnaryEncoding

AUTO = "auto"


def build_level_oracle(name: str, epsilon: float, domain: int, seed: int, rows: int, width: int) -> FrequencyOracle:
    """The oracle of one level.

    ``rows`` and ``width`` shape the sketches (0: the oracle's default);
    ``seed`` names the public hash functions where the oracle has any.
    """
    builder = ORACLE_BUILDERS.get(name)
    if builder is None:
        raise InputError(f"protocol.oracle: unknown name {name!r}; allowed: {list(ORACLE_NAMES)}")
    accepted = inspect.signature(builder).parameters
    options: dict[str, int] = {}
    if "seed" in accepted:
        options["seed"] = seed
    if rows and "rows" in accepted:
        options["rows"] = rows
    if width and "width" in accepted:
        options["width"] = width
    return make_oracle(name, epsilon=epsilon, domain=domain, **options)


@functools.lru_cache(maxsize=8)
def level_oracle(name: str, epsilon: float, domain: int, seed: int, rows: int, width: int) -> FrequencyOracle:
    """:func:`build_level_oracle`, shared by the server and the shards of one process within a
    round (expanding FLH's or a sketch's public hash functions once, not once per shard and
    once more on the server); the last 8 are kept (a search's levels and final pass)."""
    return build_level_oracle(name, epsilon, domain, seed, rows, width)


def level_draws_from_ranges(oracle: FrequencyOracle) -> bool:
    """Whether a level's members draw from range streams laid over the level's members
    (:func:`fedhh.protocols.prefix_search.reports.respond`) rather than from their own streams.

    Range streams pay where a user's report costs many words: a sketch of unary rows (CMS) whose
    sparse sampler serves them (``q' <=`` its ``SPARSE_MAX_Q``: OUE from ε = ln 7, SUE from
    2 ln 7) walks a member's ~``q' d`` set bits where its own stream draws all ``d`` bits, about
    ten times fewer words at ε = 4.  Every other oracle draws a few words a user, where the
    members' own streams cost less (benchmarks/RESULTS.md, "Where a TreeHist level's members draw
    their randomness from").  A
    plain unary encoding over a level's whole domain (PEM's OUE rows of up to 4,096 bits) keeps
    its members' streams too, which keeps PEM's results.  The choice depends on the oracle alone,
    so every shard and device of a round makes the same one.
    """
    return unary_sketch(oracle) and oracle.inner.q <= SPARSE_MAX_Q  # type: ignore[attr-defined]


def unary_sketch(oracle: FrequencyOracle) -> bool:
    """Whether the oracle is a sketch of unary rows (``cms``: count-mean over OUE rows): the one
    kind whose shards answer with the candidates' support counts when these are fewer than its
    flat cells (:func:`answers_with_support`)."""
    return isinstance(oracle, SketchOracle) and isinstance(oracle.inner, UnaryEncoding)


def answers_with_support(oracle: FrequencyOracle, candidates: int) -> bool:
    """Whether a shard answers a round of ``candidates`` candidates with their support counts
    (else with the oracle's flat statistics).

    Support counts when the oracle has no flat form (of at most ``FLAT_CELLS_LIMIT`` cells: its
    statistics grow with the reports, as OLH's), and, for a sketch of unary rows
    (:func:`unary_sketch`), when the candidates' support counts (``rows x C``, a signed sketch's
    ``2 rows x C``) are fewer than its flat cells (``rows x`` the inner domain): the server reads
    only the candidates' cells, and a simulated shard then samples only those
    (:meth:`fedhh.oracles.sketches.SketchOracle.randomize_support`), a few of a row's bits where a
    device sets ~``q' d`` of them.  Support counts of a sketch are exact integer sums of each
    report's, so the form changes no decoded count.  Every other oracle keeps its flat form
    (HCMS, whose rows a shard would have to transform to read them; a sketch of FLH rows, whose
    decoding costs the same per shard as on the server; the third-party devices'
    FLH tables).  The choice depends on the request alone (the oracle it names and the number
    of its candidates), so every shard, device and the server make the same one.
    """
    flat = oracle.flat_size()
    if flat is None:
        return True
    return unary_sketch(oracle) and _support_cells(oracle, candidates) < flat


def _support_cells(oracle: FrequencyOracle, candidates: int) -> int:
    return int(np.prod(oracle.support_shape(), dtype=np.int64)) * int(candidates)


def shard_counts(oracle: FrequencyOracle, statistics: object, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a shard sends for its reports' statistics: their flat form (so the server decodes
    the sum once), or the candidates' support counts (the shard decodes its own reports), as
    :func:`answers_with_support` says.  Either is ``(counts, reporters)``, additive."""
    if not answers_with_support(oracle, candidates.size):
        return oracle.to_flat(statistics)
    support = oracle.support(statistics, candidates)
    return support.counts.ravel(), np.atleast_1d(support.n_users)


def decode_counts(
    oracle: FrequencyOracle, counts: np.ndarray, reporters: np.ndarray, candidates: np.ndarray
) -> Support:
    """The candidates' support from the (summed) counts of :func:`shard_counts`."""
    if not answers_with_support(oracle, candidates.size):
        return oracle.support(oracle.from_flat(counts, reporters), candidates)
    return oracle.restore_support(counts, reporters)


def counts_size(oracle: FrequencyOracle, candidates: int) -> tuple[int, int]:
    """Lengths of ``(counts, reporters)`` a shard sends for ``candidates`` candidates."""
    if answers_with_support(oracle, candidates):
        return _support_cells(oracle, candidates), oracle.support_reporters()
    return int(oracle.flat_size()), oracle.support_reporters()  # type: ignore[arg-type]
