"""SPM's server: frequent segments, then frequent pairs of them assembled into candidates, then whole-value
estimates."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...oracles import make_oracle
from ...oracles.local_hashing import LocalHashing
from ...schema import PrivacySection
from ..base import Response
from ..common.prefix_encoding import PrefixEncoding
from ..common.value_reports import (
    ValueReportingServer,
    public_seed,
)
from .client import segment_pairs
from .messages import SPMRequest, SPMResponse
from .parameters import BUDGET, FINAL, MAX_CANDIDATES, NAME, ORACLE, PAIRS, SEGMENTS, SPMParameters, spm_parameters


class SPMServer(ValueReportingServer):
    """Segments, then segment pairs, then the candidates' full values (the package docstring)."""

    name = NAME
    oracle_label = ORACLE
    rounds = 3
    finished = "segments, pairs and candidates estimated"
    trace_fields = ("stage", "users", "patterns_kept", "value_pairs_kept", "candidates", "reported")
    params: SPMParameters

    def __init__(self, params: SPMParameters, codec: ItemCodec, seed: int) -> None:
        super().__init__(params, codec, BUDGET.split(NAME, params.epsilon))
        self.report_epsilon = self.split.parts[0][1]
        self.partition_seed = public_seed(seed, "spm.partition")
        # OLH; p and q do not depend on the domain
        self.oracle = typing.cast(LocalHashing, make_oracle(ORACLE, epsilon=self.report_epsilon, domain=2))
        self._patterns: list[np.ndarray] = []  # C_i
        self._candidates: np.ndarray | None = None  # value rows [K, m]
        self._kept_per_pair = 0
        self._pending: SPMRequest | None = None

    @property
    def stage(self) -> str | None:
        if self._reported is not None:
            return None
        if not self._patterns:
            return SEGMENTS
        return PAIRS if self._candidates is None else FINAL

    def next_request(self) -> SPMRequest | None:
        stage = self.stage
        if stage is None:
            return None
        if self._pending is None or self._pending.mode != stage:
            patterns = np.concatenate(self._patterns) if self._patterns else np.zeros(0, dtype=np.uint64)
            offsets = (
                np.r_[0, np.cumsum([p.size for p in self._patterns])]
                if self._patterns
                else np.zeros(self.params.segments + 1)
            )
            final = self._candidates  # set in the FINAL stage only
            candidates = self.encoding.keys(final) if final is not None else np.zeros(0, dtype=np.uint64)
            self._pending = SPMRequest(
                round=len(self._trace) + 1,
                mode=stage,
                value_bits=self.params.value_bits,
                segments=self.params.segments,
                bounds=self.params.bounds,
                epsilon=self.report_epsilon,
                partition_seed=self.partition_seed,
                patterns=patterns.astype(np.uint64),
                pattern_offsets=np.asarray(offsets, dtype=np.int64),
                candidates=candidates.astype(np.uint64),
            )
        return self._pending

    def absorb(self, response: Response) -> None:
        if not isinstance(response, SPMResponse):
            raise TypeError(f"spm: expected an SPMResponse, got {type(response).__name__}")
        stage = self.stage
        if stage == SEGMENTS:
            self._absorb_segments(response)
        elif stage == PAIRS:
            self._absorb_pairs(response)
        else:
            self._absorb_final(response)

    def _estimate(self, support: np.ndarray, reporters: float) -> np.ndarray:
        return (support - reporters * self.oracle.q) / (self.oracle.p - self.oracle.q)

    def _absorb_segments(self, response: SPMResponse) -> None:
        bounds, k = self.params.bounds, self.params.top_k
        start = 0
        for segment in range(self.params.segments):
            size = 1 << int(bounds[segment + 1] - bounds[segment])
            estimates = self._estimate(response.counts[start : start + size], float(response.reporters[segment]))
            start += size
            self._patterns.append(np.argsort(-estimates, kind="stable")[:k].astype(np.uint64))
        self._record_stage(SEGMENTS, response, patterns_kept=[int(p.size) for p in self._patterns])

    def pair_estimates(self, response: SPMResponse) -> dict[tuple[int, int], np.ndarray]:
        """Unbiased population counts of every ``(x, y)`` in ``C_i x C_j``, per segment pair (the package docstring)."""
        p, q = self.oracle.p, self.oracle.q
        pairs = segment_pairs(self.params.segments)
        joints: dict[tuple[int, int], np.ndarray] = {}
        start = 0
        for index, (first, second) in enumerate(pairs.tolist()):
            ka, kb = self._patterns[first].size, self._patterns[second].size
            both = response.counts[start : start + ka * kb].reshape(ka, kb).astype(np.float64)
            a = response.counts[start + ka * kb : start + ka * kb + ka].astype(np.float64)
            b = response.counts[start + ka * kb + ka : start + ka * kb + ka + kb].astype(np.float64)
            start += ka * kb + ka + kb
            n_pair = float(response.reporters[index])
            joints[first, second] = (
                (both - q * a[:, None] - q * b[None, :] + n_pair * q * q) / (p - q) ** 2 * len(pairs)
            )
        return joints

    def _absorb_pairs(self, response: SPMResponse) -> None:
        joints = self.pair_estimates(response)
        kept = self.params.top_k
        while True:
            candidates = self._assemble(joints, kept)
            largest = max(j.size for j in joints.values())
            if candidates.shape[0] > self.params.top_k or kept >= largest:
                break
            kept *= 2
        self._kept_per_pair = min(kept, max(j.size for j in joints.values()))
        rows = self._rows(candidates)
        self._candidates = rows[self.encoding.reportable(rows)][:MAX_CANDIDATES]
        self._record_stage(
            PAIRS, response, value_pairs_kept=self._kept_per_pair, candidates=int(self._candidates.shape[0])
        )

    def _assemble(self, joints: dict[tuple[int, int], np.ndarray], kept: int) -> np.ndarray:
        """Index tuples ``[K, g]`` into ``C_0 .. C_{g-1}`` whose every segment pair is among its pair's
        ``kept`` best."""
        frequent = {}
        for pair, joint in joints.items():
            flat = np.zeros(joint.size, dtype=bool)
            flat[np.argsort(-joint.ravel(), kind="stable")[:kept]] = True
            frequent[pair] = flat.reshape(joint.shape)
        partial = np.arange(self._patterns[0].size)[:, None]
        for segment in range(1, self.params.segments):
            size = self._patterns[segment].size
            grown = np.concatenate(
                [np.repeat(partial, size, axis=0), np.tile(np.arange(size), partial.shape[0])[:, None]], axis=1
            )
            keep = np.ones(grown.shape[0], dtype=bool)
            for earlier in range(segment):
                keep &= frequent[earlier, segment][grown[:, earlier], grown[:, segment]]
            partial = grown[keep][:MAX_CANDIDATES]
        return partial

    def _rows(self, chosen: np.ndarray) -> np.ndarray:
        """Value bit rows ``[K, m]`` of index tuples into the segments' patterns."""
        rows = np.zeros((chosen.shape[0], self.params.value_bits), dtype=np.uint8)
        bounds = self.params.bounds
        for segment in range(self.params.segments):
            width = int(bounds[segment + 1] - bounds[segment])
            values = self._patterns[segment][chosen[:, segment]] if chosen.size else np.zeros(0, dtype=np.uint64)
            shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
            rows[:, bounds[segment] : bounds[segment + 1]] = (values[:, None] >> shifts) & np.uint64(1)
        return rows

    def _absorb_final(self, response: SPMResponse) -> None:
        assert self._candidates is not None
        estimates = self._estimate(response.counts.astype(np.float64), float(response.reporters[0]))
        reported = self._report(self._candidates, estimates)
        self._record_stage(FINAL, response, candidates=int(estimates.size), reported=reported)

    def _record_stage(self, stage: str, response: SPMResponse, **values: Any) -> None:
        self._record(stage=stage, users=response.responding_users, **values)

    def progress_note(self) -> str:
        return f"{self.stage or 'done'}: {self.params.segments} segments of {self.params.segment_bits} bits"

    def describe(self) -> dict[str, Any]:
        params = self.params
        return {
            **self.encoding.describe(),
            "segments": params.segments,
            "segment_bits": params.segment_bits,
            "segment_bounds": [int(b) for b in params.bounds],
            "segment_pairs": params.segments * (params.segments - 1) // 2,
            "report_epsilon": self.report_epsilon,
            "top_k": params.top_k,
        }


def build_spm(
    privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> SPMServer:
    value_bits = PrefixEncoding("bits", codec).length
    return SPMServer(spm_parameters(protocol, privacy.epsilon, n_users, value_bits), codec, seed)
