"""SFP's law sampler: a shard's two sketches, drawn from their law given its item counts.

Given a shard's item counts:

* **Which item each user reports**, once per run: its one item, or,
  holding several, one drawn by local frequency
  (:func:`~fedhh.protocols.law.reported_holders`); users without an item
  report the empty value (all symbols 0), as the users path has them.
* **Positions.**  A user's fragment position is a public uniform keyed by
  its id (:func:`~fedhh.protocols.sfp.encoding.user_positions`),
  independently for every user, so an item's reporters split over the
  ``P`` positions as ``Multinomial(reporters, 1/P)`` (the users path's
  ``floor(u P)`` of a 53-bit uniform ``u`` gives each position ``1/P`` to
  2^-53).
* **The fragment sketch**, per position: the position's reporters send
  their item's fragment at that position with the word's hash, one value
  per item (:func:`~fedhh.protocols.sfp.encoding.vocabulary_values`, items
  sharing a fragment and a hash adding up), through the fragment sketch;
  its statistics are drawn from the sketch's law
  (:func:`~fedhh.oracles.laws.statistics_law`: each reporter's sketch row
  uniform, then the inner oracle's law per row).
* **The word sketch**: every reporter's word key through the word sketch,
  the same way.

Every step is the users path's law (independent users, a public position
and an ε-LDP report each), so both sketches have exactly its distribution:
CMS's unary rows and HCMS's Hadamard coefficients have derived laws, exact
with the sketches' own public row hashes (no ideal-hash assumption).  The
draws come from generators keyed by (seed, shard).
"""

from __future__ import annotations

import numpy as np

from ...data.counted import CountedShard
from ...kernels.randomness import KeyedRandomness
from ...oracles.laws import statistics_law
from ...oracles.sketches import SketchStatistics
from ..law import reported_holders, shard_generator
from .encoding import vocabulary_values
from .messages import SFPRequest, SFPResponse

POSITIONS_PURPOSE = "sfp.law-positions"
REPORTS_PURPOSE = "sfp.law-reports"


def law(request: SFPRequest, counts: CountedShard, randomness: KeyedRandomness) -> SFPResponse:
    """A shard's fragment and word sketches, drawn from their law (module docstring)."""
    codec = counts.vocabulary.codec
    fragments = request.fragment_codec(codec)
    fragment_oracle = request.fragment_oracle(codec)
    reports, words = vocabulary_values(fragments, counts.vocabulary)
    reporters = reported_holders(counts, randomness)  # [V + 1]: the last, the empty value
    positions = fragments.positions
    placed = shard_generator(randomness, POSITIONS_PURPOSE, request.round, counts).multinomial(
        reporters, np.full(positions, 1.0 / positions)
    )  # [V + 1, P]
    rng = shard_generator(randomness, REPORTS_PURPOSE, request.round, counts)
    cells = fragment_oracle.flat_size()
    assert cells is not None  # the server refuses a fragment sketch too large to send flat
    fragment_counts = np.zeros((positions, cells), dtype=np.int64)
    fragment_reporters = np.zeros((positions, request.sketch_rows), dtype=np.int64)
    for position in range(positions):
        statistics = statistics_law(fragment_oracle, reports[:, position], placed[:, position], rng)
        assert isinstance(statistics, SketchStatistics)
        fragment_counts[position], fragment_reporters[position] = fragment_oracle.to_flat(statistics)
    word_counts = np.zeros(0, dtype=np.int64)
    word_reporters = np.zeros(0, dtype=np.int64)
    if request.word_epsilon > 0:
        word_oracle = request.word_oracle()
        statistics = statistics_law(word_oracle, words, reporters, rng)
        assert isinstance(statistics, SketchStatistics)
        word_cells, senders = word_oracle.to_flat(statistics)
        word_counts, word_reporters = np.asarray(word_cells, dtype=np.int64), np.asarray(senders, dtype=np.int64)
    return SFPResponse(
        round=request.round,
        sampled_users=counts.n_users,
        responding_users=counts.n_users,
        fragment_counts=fragment_counts,
        fragment_reporters=fragment_reporters,
        word_counts=word_counts,
        word_reporters=word_reporters,
    )
