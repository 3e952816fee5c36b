"""SFP's server: frequent fragments per position, assembled by word hash into candidate words, then
the words estimated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...errors import InputError
from ...privacy.ldp import ldp_report
from ...privacy.report import PrivacyReport
from ...privacy.validation import check_users
from ...schema import PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..common.report_mode import SIGNIFICANT, check_report_mode
from ..common.value_reports import public_seed
from .analysis import best_first, fragment_pairs, fragment_positions, median, sfp_split
from .messages import SFPRequest, SFPResponse
from .parameters import (
    HASH_PURPOSE,
    HASH_VALUES,
    MAX_PUZZLE,
    NAME,
    ORACLE_PURPOSE,
    POSITION_PURPOSE,
    SKETCH_ORACLES,
    SFPKeys,
)


@dataclass(frozen=True)
class SFPParameters:
    """A config's SFP settings, checked with errors naming the key."""

    n_users: int
    epsilon: float
    fragment_length: int
    fragment_share: float
    word_pass: bool
    fragment_candidates: int
    words_reported: int
    fragment_oracle: str  # the oracle of both sketches
    fragment_sketch_rows: int  # rows of both sketches
    fragment_sketch_width: int  # width of both sketches
    report: str = SIGNIFICANT  # significant | top_k (fedhh.protocols.common.report_mode)

    def __post_init__(self) -> None:
        check_users(self.n_users)
        if self.fragment_oracle not in SKETCH_ORACLES:
            raise InputError(f"protocol.fragment_oracle: got {self.fragment_oracle!r}; allowed: {list(SKETCH_ORACLES)}")
        sfp_split(self.epsilon, fragment_share=self.fragment_share, word_pass=self.word_pass)
        check_report_mode(self.report)


@dataclass
class Puzzle:
    """What the server found: the kept fragments per position and the reassembled words."""

    kept: list[np.ndarray]  # per position, the kept report keys (fragment x 256 + hash)
    rows: np.ndarray  # candidate words [K, U]
    estimates: np.ndarray  # their count estimates
    thresholds: list[float]  # per position, the estimate a pair needed


class SFPServer(ServerProtocol):
    """One round of fragment and word reports, the puzzle solved once."""

    def __init__(self, params: SFPParameters, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.codec = codec
        positions = fragment_positions(codec, params.fragment_length)
        self.pairs = fragment_pairs(codec, params.fragment_length)
        self.split = sfp_split(params.epsilon, fragment_share=params.fragment_share, word_pass=params.word_pass)
        self.positions = positions
        self.seeds = {
            purpose: public_seed(seed, purpose) for purpose in (POSITION_PURPOSE, ORACLE_PURPOSE, HASH_PURPOSE)
        }
        self._request = SFPRequest(
            round=1,
            fragment_length=params.fragment_length,
            oracle=params.fragment_oracle,
            fragment_epsilon=self.split.parts[0][1],
            word_epsilon=self.split.parts[1][1] if len(self.split.parts) > 1 else 0.0,
            sketch_rows=params.fragment_sketch_rows,
            sketch_width=params.fragment_sketch_width,
            position_seed=self.seeds[POSITION_PURPOSE],
            oracle_seed=self.seeds[ORACLE_PURPOSE],
            hash_seed=self.seeds[HASH_PURPOSE],
        )
        if self._request.fragment_oracle(codec).flat_size() is None:  # also refuses a sketch that cannot be built
            raise InputError(
                f"protocol.fragment_sketch_width: {params.fragment_sketch_rows} rows x {params.fragment_sketch_width} "
                "columns are too many cells for a shard to send; use fewer rows or a narrower sketch"
            )
        self.fragments = self._request.fragment_codec(codec)
        self._puzzle: Puzzle | None = None
        self._trace: list[RoundRecord] = []

    @property
    def max_rounds(self) -> int:
        return 1

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def next_request(self) -> SFPRequest | None:
        return None if self._trace else self._request

    def absorb(self, response: Response) -> None:
        if not isinstance(response, SFPResponse):
            raise TypeError(f"sfp expects an SFPResponse, got {type(response).__name__}")
        if self._trace or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        self._puzzle = self.solve(response)
        self._trace.append(
            RoundRecord(
                1,
                {
                    "users": int(response.responding_users),
                    "fragments_kept": [int(kept.size) for kept in self._puzzle.kept],
                    "candidates": int(self._puzzle.rows.shape[0]),
                    "reported": int(self._reported().size),
                },
            )
        )

    def _reported(self) -> np.ndarray:
        """Indices of the reported candidate words, best estimate first: at most
        ``words_reported``, only positive estimates unless ``report = top_k``."""
        puzzle = self._puzzle
        assert puzzle is not None
        order = np.argsort(-puzzle.estimates, kind="stable")
        if self.params.report == SIGNIFICANT:
            order = order[puzzle.estimates[order] > 0]
        return order[: self.params.words_reported]

    def solve(self, response: SFPResponse) -> Puzzle:
        """Fragments above the noise level, the puzzle, and the words' estimates (the package docstring)."""
        oracle = self._request.fragment_oracle(self.codec)
        z = NormalDist().inv_cdf(1 - 1 / self.pairs)
        kept: list[np.ndarray] = []
        kept_estimates: list[np.ndarray] = []
        thresholds: list[float] = []
        statistics = [
            oracle.from_flat(counts, reporters)
            for counts, reporters in zip(response.fragment_counts, response.fragment_reporters, strict=True)
        ]
        every_position = oracle.domain_estimates(statistics)  # every pair of every position, hashed once
        every_position *= self.positions  # the position's share is 1/P
        deviations = np.empty(self.pairs)
        for estimates in every_position:
            np.subtract(estimates, median(estimates, deviations), out=deviations)
            np.abs(deviations, out=deviations)
            threshold = z * 1.4826 * float(median(deviations, deviations))
            order = best_first(estimates, self.params.fragment_candidates)
            if self.params.report == SIGNIFICANT:
                order = order[estimates[order] > threshold]
            kept.append(order.astype(np.int64))
            kept_estimates.append(estimates[order])
            thresholds.append(threshold)
        rows, fragment_means = self._assemble(kept, kept_estimates)
        if rows.shape[0] and self._request.word_epsilon > 0:
            word_oracle = self._request.word_oracle()
            words = word_oracle.from_flat(response.word_counts, response.word_reporters)
            estimates = word_oracle.estimate(words, self.fragments.word_keys(rows))
        else:
            estimates = fragment_means
        return Puzzle(kept, rows, estimates, thresholds)

    def _assemble(self, kept: list[np.ndarray], estimates: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Every word one kept fragment per position spells with one hash, whose own hash is that
        hash and which encodes some item; and the mean of its fragments' estimates."""
        words: list[np.ndarray] = []
        means: list[np.ndarray] = []
        common = set.intersection(*(set((keys % HASH_VALUES).tolist()) for keys in kept)) if kept else set()
        for hash_value in sorted(common):
            pieces = [
                (keys[keys % HASH_VALUES == hash_value], scores[keys % HASH_VALUES == hash_value])
                for keys, scores in zip(kept, estimates, strict=True)
            ]
            while math.prod(keys.size for keys, _ in pieces) > MAX_PUZZLE:  # drop the weakest of the longest list
                longest = max(range(len(pieces)), key=lambda i: pieces[i][0].size)
                keys, scores = pieces[longest]
                strongest = np.argsort(-scores, kind="stable")[:-1]
                pieces[longest] = (keys[strongest], scores[strongest])
            grids = np.meshgrid(*[np.arange(keys.size) for keys, _ in pieces], indexing="ij")
            choice = [grid.ravel() for grid in grids]
            fragments = np.stack(
                [keys[pick] // HASH_VALUES for (keys, _), pick in zip(pieces, choice, strict=True)], axis=1
            )
            scores = np.mean([s[pick] for (_, s), pick in zip(pieces, choice, strict=True)], axis=0)
            rows = self.fragments.unfragment(fragments.astype(np.int64))
            valid = self.fragments.encoding.reportable(rows)
            valid &= self.fragments.word_hashes(self.fragments.word_keys(rows)) == hash_value
            words.append(rows[valid])
            means.append(np.atleast_1d(scores)[valid])
        if not words:
            return np.zeros((0, self.codec.max_symbols), dtype=np.int64), np.zeros(0)
        return np.concatenate(words), np.concatenate(means)

    def privacy_report(self) -> PrivacyReport:
        p = self.params
        return ldp_report(
            self.split,
            p.fragment_oracle,
            {
                "positions": self.positions,
                "fragment_length": p.fragment_length,
                "hash_bits": 8,
                "sketch_rows": p.fragment_sketch_rows,
                "sketch_width": p.fragment_sketch_width,
                "position": "sent in the clear: drawn by public randomness, independent of the user's value",
            },
        )

    def result(self) -> ProtocolResult:
        discoveries: list[Discovery] = []
        if self._puzzle is not None:
            puzzle = self._puzzle
            for index in self._reported().tolist():
                row = puzzle.rows[index]
                discoveries.append(
                    Discovery(
                        self.fragments.encoding.decode(row),
                        tuple(int(s) for s in row),
                        estimated_count=float(puzzle.estimates[index]),
                    )
                )
        p = self.params
        return ProtocolResult(
            protocol=NAME,
            discoveries=discoveries,
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params={
                "fragment_length": p.fragment_length,
                "positions": self.positions,
                "fragment_share": p.fragment_share,
                "word_pass": p.word_pass,
                "fragment_candidates": p.fragment_candidates,
                "words_reported": p.words_reported,
                "report": p.report,
                "oracle": p.fragment_oracle,
                "sketch_rows": p.fragment_sketch_rows,
                "sketch_width": p.fragment_sketch_width,
                "fragment_thresholds": [round(t, 1) for t in self._puzzle.thresholds] if self._puzzle else None,
            },
            stopped_because="one round of fragment and word reports decoded" if self._trace else "not finished",
        )


def build_sfp(
    privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> SFPServer:
    return SFPServer(SFPParameters(n_users, privacy.epsilon, **SFPKeys.of(protocol).values()), codec, seed)
