"""RAPPOR's server: the cohorts' bit counts decoded against a candidate dictionary by regression and a
Bonferroni-corrected test."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from ...data.items import ItemCodec
from ...data.population import Vocabulary
from ...errors import InputError
from ...kernels.blas import single_blas_thread
from ...privacy.ldp import ldp_report
from ...privacy.report import Coverage, PrivacyReport
from ...privacy.validation import check_users
from ...schema import PrivacySection
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..common.report_mode import SIGNIFICANT, TOP_K, check_report_mode
from ..common.value_reports import public_seed
from .analysis import check_bloom_size, rappor_split, significance_level
from .encoding import BloomEncoder, cached_pair_positions, vocabulary_keys
from .messages import RapporRequest, RapporResponse
from .parameters import (
    CANDIDATES_PER_BLOCK,
    COHORT_PURPOSE,
    HASH_PURPOSE,
    MAX_REGRESSED,
    NAME,
    POPULATION_DICTIONARY_NOTE,
    SIGNIFICANCE,
    RapporKeys,
)


@dataclass(frozen=True)
class RapporParameters:
    """A config's RAPPOR settings, checked with errors naming the key."""

    n_users: int
    epsilon: float
    bloom_bits: int
    bloom_hashes: int
    cohorts: int
    candidates: str  # dictionary file; empty: the population's vocabulary
    report: str = SIGNIFICANT  # significant | top_k (fedhh.protocols.common.report_mode)
    top_k: int = 32  # K: candidates reported under report = top_k

    def __post_init__(self) -> None:
        check_users(self.n_users)
        rappor_split(self.epsilon, bloom_hashes=self.bloom_hashes)
        check_report_mode(self.report)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise InputError(f"protocol.top_k: must be an integer >= 1, got {self.top_k!r}")

    @property
    def at_least(self) -> int:
        """Candidates the decoder regresses whatever their screening score (0: only those above it)."""
        return self.top_k if self.report == TOP_K else 0


@dataclass
class Regression:
    """The decoder's outcome: the regressed candidates, their estimates and standard errors."""

    candidates: np.ndarray  # indices into the dictionary
    estimates: np.ndarray
    errors: np.ndarray
    threshold: float  # z-score a candidate needs


class RapporServer(ServerProtocol):
    """One round of Bloom filters, decoded by regression against the candidate dictionary."""

    def __init__(self, params: RapporParameters, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.codec = codec
        self.split = rappor_split(params.epsilon, bloom_hashes=params.bloom_hashes)
        self.cohort_seed = public_seed(seed, COHORT_PURPOSE)
        self.hash_seed = public_seed(seed, HASH_PURPOSE)
        self.dictionary: Vocabulary | None = None
        self.dictionary_source = "population vocabulary" if not params.candidates else params.candidates
        if params.candidates:
            self._set_dictionary(read_dictionary(params.candidates, codec))
        self._regression: Regression | None = None
        self._trace: list[RoundRecord] = []

    def offer_vocabulary(self, vocabulary: Vocabulary) -> None:
        if not self.params.candidates:
            self._set_dictionary(vocabulary)

    def _set_dictionary(self, dictionary: Vocabulary) -> None:
        if dictionary.size == 0:
            raise InputError(
                f"protocol.candidates: the dictionary ({self.dictionary_source}) holds no encodable candidate"
            )
        check_bloom_size(self.params.bloom_bits, self.params.cohorts, dictionary.size)
        self.dictionary = dictionary

    @property
    def encoder(self) -> BloomEncoder:
        p = self.params
        return BloomEncoder(p.epsilon, p.bloom_bits, p.bloom_hashes, p.cohorts, self.hash_seed)

    # -- ServerProtocol ----------------------------------------------------------------------

    @property
    def max_rounds(self) -> int:
        return 1

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def check_ready(self) -> None:
        if self.dictionary is None:
            raise InputError(
                "protocol.candidates: no population vocabulary here (a deployment's server holds none); "
                "name a candidate dictionary file"
            )

    def next_request(self) -> RapporRequest | None:
        if self._trace:
            return None
        self.check_ready()
        p = self.params
        return RapporRequest(
            round=1,
            epsilon=p.epsilon,
            bloom_bits=p.bloom_bits,
            bloom_hashes=p.bloom_hashes,
            cohorts=p.cohorts,
            cohort_seed=self.cohort_seed,
            hash_seed=self.hash_seed,
        )

    def absorb(self, response: Response) -> None:
        if not isinstance(response, RapporResponse):
            raise TypeError(f"rappor expects a RapporResponse, got {type(response).__name__}")
        if self._trace or response.round != 1:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        assert self.dictionary is not None
        self._regression = decode(self.encoder, response, vocabulary_keys(self.dictionary), self.params.at_least)
        found = int(np.count_nonzero(self._significant()))
        values = {
            "users": int(response.responding_users),
            "candidates": self.dictionary.size,
            "regressed": int(self._regression.candidates.size),
            "significant": found,
        }
        if self.params.report == TOP_K:
            values["reported"] = int(self._reported().size)
        self._trace.append(RoundRecord(1, values))

    def _significant(self) -> np.ndarray:
        regression = self._regression
        assert regression is not None
        return regression.estimates > regression.threshold * regression.errors

    def _reported(self) -> np.ndarray:
        """Indices into the regression of the reported candidates, best estimate first:
        the significant ones, or under ``report = top_k`` the ``K`` best whatever their significance."""
        regression = self._regression
        assert regression is not None
        if self.params.report == TOP_K:
            return np.argsort(-regression.estimates, kind="stable")[: self.params.top_k]
        significant = np.flatnonzero(self._significant())
        return significant[np.argsort(-regression.estimates[significant], kind="stable")]

    def privacy_report(self) -> PrivacyReport:
        p = self.params
        bit_p, bit_q = self.encoder.probabilities
        report = ldp_report(
            self.split,
            "SUE on Bloom filter bits",
            {
                "bloom_bits": p.bloom_bits,
                "bloom_hashes": p.bloom_hashes,
                "cohorts": p.cohorts,
                "bit_keep_probability": bit_p,
                "bit_flip_on_probability": bit_q,
                "candidate_dictionary": self.dictionary_source,
            },
        )
        if p.candidates:
            return report
        assert report.coverage is not None  # an LDP report states what it covers
        coverage = Coverage(report.coverage.covered, (*report.coverage.not_covered, POPULATION_DICTIONARY_NOTE))
        return dataclasses.replace(report, coverage=coverage)

    def progress_note(self) -> str:
        return f"{self.dictionary.size if self.dictionary else 0:,} candidates"

    def result(self) -> ProtocolResult:
        discoveries: list[Discovery] = []
        if self._regression is not None:
            assert self.dictionary is not None
            regression = self._regression
            order = self._reported()
            for index, estimate in zip(
                regression.candidates[order].tolist(), regression.estimates[order].tolist(), strict=True
            ):
                row = self.dictionary.rows[index]
                discoveries.append(
                    Discovery(self.dictionary.items[index], tuple(int(s) for s in row), estimated_count=float(estimate))
                )
        p = self.params
        return ProtocolResult(
            protocol=NAME,
            discoveries=discoveries,
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params={
                "bloom_bits": p.bloom_bits,
                "bloom_hashes": p.bloom_hashes,
                "cohorts": p.cohorts,
                "candidate_dictionary": self.dictionary_source,
                "candidates": self.dictionary.size if self.dictionary else 0,
                "significance": SIGNIFICANCE,
                "significance_z": self._regression.threshold if self._regression else None,
                "report": p.report,
                **({"top_k": p.top_k} if p.report == TOP_K else {}),
            },
            stopped_because="one round of Bloom filters decoded" if self._trace else "not finished",
        )


def read_dictionary(path: str, codec: ItemCodec) -> Vocabulary:
    """A candidate dictionary file (UTF-8 text, one candidate per line) encoded with the run's codec."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"protocol.candidates: cannot read {path!r} as UTF-8 text ({error})") from None
    candidates = list(dict.fromkeys(line.strip() for line in lines if line.strip()))
    vocabulary, _ = Vocabulary.encode(candidates, dataclasses.replace(codec, overlong="drop", unknown_chars="drop"))
    return vocabulary


def decode(
    encoder: BloomEncoder, response: RapporResponse, candidate_keys: np.ndarray, at_least: int = 0
) -> Regression:
    """Bit estimates, screening, regression and the significance threshold (the package docstring).

    ``at_least``: the best-scored candidates regressed whatever their score
    (``report = top_k``: the ``K`` the server must report); 0 keeps only those
    above the screening level.
    """
    from scipy import sparse  # server side only: devices never import scipy

    p, q = encoder.probabilities
    cohorts, bits = encoder.cohorts, encoder.bloom_bits
    reporters = response.reporters.astype(np.float64)
    estimates = (response.ones.reshape(cohorts, bits) - q * reporters[:, None]) / (p - q)
    centred = estimates - estimates.mean(axis=1, keepdims=True)
    all_cohorts = np.arange(cohorts)
    cohort_rows = (all_cohorts * bits)[None, :, None]  # where cohort c's bits start in the flat estimates
    scores = np.empty(candidate_keys.size)
    known = cached_pair_positions(encoder, candidate_keys)  # hashed by this process's shards
    for first in range(0, candidate_keys.size, CANDIDATES_PER_BLOCK):
        keys = candidate_keys[first : first + CANDIDATES_PER_BLOCK]
        if known is not None:
            positions = known[first : first + CANDIDATES_PER_BLOCK]
        else:
            positions = encoder.positions(keys[:, None], all_cohorts[None, :])  # (K, C, h)
        scores[first : first + keys.size] = (
            centred.ravel().take(positions + cohort_rows).reshape(keys.size, -1).sum(axis=1)
        )
    spread = 1.4826 * float(np.median(np.abs(centred)))  # robust sd of a bit estimate: heavy bits stand out
    screen = (
        NormalDist().inv_cdf(1 - 1 / max(candidate_keys.size, 2)) * spread * math.sqrt(encoder.bloom_hashes * cohorts)
    )
    limit = min(max(1, bits * cohorts // 4), MAX_REGRESSED)
    ranked = np.argsort(-scores, kind="stable")
    chosen = np.sort(ranked[:limit])
    chosen = chosen[scores[chosen] > screen]
    if at_least:
        chosen = np.union1d(chosen, ranked[:at_least])
    regressed = chosen.size
    positions = encoder.positions(candidate_keys[chosen][:, None], all_cohorts[None, :])  # (R, C, h)
    first_time = np.ones(positions.shape, dtype=bool)  # an item sets a bit once, however many hashes hit it
    for j in range(1, encoder.bloom_hashes):
        first_time[..., j] = np.all(positions[..., j : j + 1] != positions[..., :j], axis=-1)
    weights = reporters / max(float(reporters.sum()), 1.0)  # N_c / N
    column, cohort, _ = np.nonzero(first_time)
    rows = cohort * bits + positions[first_time]
    design = sparse.csr_matrix(
        (
            np.concatenate([weights[cohort], np.repeat(weights, bits)]),
            (
                np.concatenate([rows, np.arange(cohorts * bits)]),
                np.concatenate([column, np.full(cohorts * bits, regressed)]),
            ),
        ),
        shape=(cohorts * bits, regressed + 1),
    )
    target = estimates.ravel()
    beta, inverse_diagonal = solve_normal((design.T @ design).toarray(), design.T @ target)
    residuals = target - design @ beta
    variance = float(residuals @ residuals) / max(cohorts * bits - regressed - 1, 1)
    errors = np.sqrt(np.maximum(inverse_diagonal[:regressed], 0.0) * variance)
    return Regression(chosen, beta[:regressed], errors, significance_level(candidate_keys.size))


def solve_normal(normal: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``β = (XᵀX)⁻¹ Xᵀt`` and the diagonal of ``(XᵀX)⁻¹``, by Cholesky (the columns are
    independent unless two candidates share every bit in every cohort), else by the
    pseudo-inverse, which gives such twins their mean.

    The diagonal is the columns' squared norms of ``L⁻¹`` (``XᵀX = L Lᵀ``) and ``β = L⁻ᵀ L⁻¹
    Xᵀt``: one triangular inversion, not a solve against the identity, which costs three
    times the arithmetic.  One BLAS thread (:mod:`fedhh.kernels.blas`): at these sizes more only spin.
    """
    from scipy import linalg  # before the limit, so that it covers scipy's own BLAS too

    with single_blas_thread():
        try:
            factor = linalg.cholesky(normal, lower=True)
        except linalg.LinAlgError:
            inverse = np.linalg.pinv(normal, hermitian=True)
            return inverse @ rhs, np.diag(inverse).copy()
        inverse_factor, _ = linalg.lapack.dtrtri(factor, lower=1)  # L has a positive diagonal: invertible
        return inverse_factor.T @ (inverse_factor @ rhs), np.einsum("ij,ij->j", inverse_factor, inverse_factor)


def build_rappor(
    privacy: PrivacySection, protocol: Mapping[str, Any], n_users: int, codec: ItemCodec, seed: int
) -> RapporServer:
    return RapporServer(RapporParameters(n_users, privacy.epsilon, **RapporKeys.of(protocol).values()), codec, seed)
