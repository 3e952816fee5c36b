"""The prefix search's law sampler (PEM, TreeHist): a shard's reports summed, drawn from their law.

Given a shard's item counts:

* **Which item each user reports**, once per run: its one item, or, holding
  several, one drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); users without an item
  report the empty value.
* **Levels.**  A user's level is a public uniform keyed by its id, compared
  with the level bounds, independently for every user: a level holds each
  of its users with the probability ``P(bound_i <= u < bound_(i+1))`` of a
  53-bit uniform ``u`` (the levels' shares, to 2^-53).  So an item's
  reporters split over the levels as ``Multinomial(reporters, those
  probabilities)``, drawn once per run and shard and kept between rounds.
* **A level round**: the level's members report their item's prefix of the
  level's length through the level's oracle; the members' prefixes are the
  items' prefix keys weighted by their counts, and the oracle's law draws
  what the shard sends (:mod:`fedhh.oracles.laws`): its statistics' flat
  form, or the candidates' support counts where the shard answers with
  them (:func:`~fedhh.protocols.prefix_search.oracles.answers_with_support`,
  the same choice as the users path).
* **TreeHist's final round**: every user's full value through the final
  oracle, the same way.
* **A one-shot collection** sends every report (a table of distinct report
  rows), whose size grows with the users: the reports are drawn from the
  counts (each user's level value and full value through the oracles, with
  a generator), the users path's law at its cost.

Exact wherever the oracle's law is (see :mod:`fedhh.oracles.laws` for the
ideal-hash assumption of OLH and BLH).
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ...oracles.laws import statistics_law, support_law
from ..common.prefix_encoding import PrefixEncoding
from ..law import reported_holders, shard_generator
from .oracles import answers_with_support
from .report_table import distinct_rows, to_table
from .reports import COLLECT, FINAL, MODES, PrefixRequest, PrefixResponse

LEVELS_PURPOSE = "prefix.law-levels"
REPORTS_PURPOSE = "prefix.law-reports"
_UNIFORM_STEPS = float(1 << 53)


def level_probabilities(level_bounds: np.ndarray) -> np.ndarray:
    """The probability of each level for a user's 53-bit uniform ``u`` (its level: the number of
    inner bounds ``b <= u``, :func:`~fedhh.protocols.prefix_search.reports.user_levels`)."""
    inner = np.clip(np.ceil(np.asarray(level_bounds, dtype=np.float64)[1:-1] * _UNIFORM_STEPS), 0.0, _UNIFORM_STEPS)
    edges = np.concatenate(([0.0], np.maximum.accumulate(inner), [_UNIFORM_STEPS]))
    return np.diff(edges) / _UNIFORM_STEPS


def level_holders(request: PrefixRequest, counts: CountedShard, randomness: KeyedRandomness) -> np.ndarray:
    """``[V + 1, levels]``: how many of the shard's reporters of each item (the last row: the empty
    value) each level holds, drawn once per run and shard (module docstring)."""
    key = (LEVELS_PURPOSE, randomness.seed, int(request.partition_seed), request.level_bounds.tobytes())
    if key not in counts.memo:
        rng = shard_generator(randomness, LEVELS_PURPOSE, 0, counts)
        split = rng.multinomial(reported_holders(counts, randomness), level_probabilities(request.level_bounds))
        split.flags.writeable = False
        counts.memo[key] = split.astype(np.int64)
    return counts.memo[key]


def law(request: PrefixRequest, counts: CountedShard, randomness: KeyedRandomness) -> PrefixResponse:
    """A shard's answer to one prefix-search round, drawn from its law (module docstring)."""
    if request.mode not in MODES:
        raise ValueError(f"request.mode: got {request.mode!r}; allowed: {list(MODES)}")
    encoding = PrefixEncoding(request.encoding, counts.vocabulary.codec)  # type: ignore[arg-type]
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    if request.mode == COLLECT:
        return _collect(request, counts, randomness, encoding, rng)
    if request.mode == FINAL:
        reporters = reported_holders(counts, randomness)
        length, epsilon = encoding.length, request.final_epsilon
    else:
        reporters = level_holders(request, counts, randomness)[:, request.level]
        length, epsilon = int(request.lengths[request.level]), request.epsilon
    oracle = request.oracle_for(length, epsilon, encoding)
    keys = encoding.prefix_keys(counts.vocabulary, length)
    if answers_with_support(oracle, request.candidates.size):
        support = support_law(oracle, keys, reporters, request.candidates, rng)
        cells, senders = support.counts.ravel(), np.atleast_1d(support.n_users)
    else:
        cells, senders = oracle.to_flat(statistics_law(oracle, keys, reporters, rng))
    reporting = int(reporters.sum())
    return PrefixResponse(
        round=request.round,
        sampled_users=reporting,
        responding_users=reporting,
        counts=np.asarray(cells, dtype=np.int64),
        reporters=np.asarray(senders, dtype=np.int64),
        report_rows=np.zeros((0, 0), dtype=np.uint64),
        report_counts=np.zeros(0, dtype=np.int64),
    )


def _collect(
    request: PrefixRequest,
    counts: CountedShard,
    randomness: KeyedRandomness,
    encoding: PrefixEncoding,
    rng: np.random.Generator,
) -> PrefixResponse:
    """Every user's reports as one table ``[level, level report..., full-value report...]``, the
    users drawn from the counts (one row per user, as the users path sends them)."""
    split = level_holders(request, counts, randomness)
    items = np.arange(split.shape[0])
    final_keys = encoding.prefix_keys(counts.vocabulary, encoding.length)
    tables = []
    for level in range(request.levels):
        held = np.repeat(items, split[:, level])
        length = int(request.lengths[level])
        oracle = request.oracle_for(length, request.epsilon, encoding)
        reports = to_table(oracle.randomize(encoding.prefix_keys(counts.vocabulary, length)[held], rng))
        columns = [np.full((reports.shape[0], 1), level, dtype=np.uint64), reports]
        if request.final_epsilon > 0:
            final = request.oracle_for(encoding.length, request.final_epsilon, encoding)
            columns.append(to_table(final.randomize(final_keys[held], rng)))
        tables.append(np.concatenate(columns, axis=1))
    rows, tallies = distinct_rows(np.concatenate(tables))
    return PrefixResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        counts=np.zeros(0, dtype=np.int64),
        reporters=np.zeros(0, dtype=np.int64),
        report_rows=rows,
        report_counts=tallies,
    )
