"""Hierarchical prefix search: the server state machine PEM and TreeHist share.

[Cormode21] §5 groups them as one family: build frequency oracles on prefixes
of increasing length, and at each level query only the extensions of the
prefixes that survived the level before.  Level ``i`` asks its users for
prefixes of ``l_i = γ + η_1 + ... + η_i`` units (``l_g = m``, the whole
value); the candidates are the survivors of level ``i - 1`` extended by
every segment of ``η_i`` units (level 1: every prefix of ``l_1`` units).
Survivors are the ``candidates_per_step`` best estimates (top-k selection),
or the estimates at or above a threshold, at most that many (threshold
selection).  Estimates are scaled from the level's users to the whole
population by the level's share (holders of ``v`` among the level's users
are Binomial(c_v, share), so the scaled estimate stays unbiased).

The protocols differ only after the last level:

* PEM reports the last level's survivors with that level's estimates;
* TreeHist asks every user once more, for the full value with the other
  half of its budget, and reports the survivors with those estimates.

Estimates of the reported values go through the configured consistency
post-processing ([Wang20]) over the candidates estimated together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...data.items import ItemCodec
from ...errors import InputError
from ...kernels.randomness import derive_key
from ...oracles import FrequencyOracle, LinearVariance, Support
from ...oracles.registry import ORACLE_NAMES
from ...privacy.ldp import BudgetRule, BudgetSplit, ldp_report
from ...privacy.report import PrivacyReport
from ...privacy.validation import check_epsilon, check_positive_int, check_users
from ..base import Discovery, ProtocolResult, Response, RoundRecord, ServerProtocol
from ..common.prefix_encoding import ENCODINGS, Encoding, PrefixEncoding
from .oracles import decode_counts, level_oracle
from .report_table import expand, from_table, to_table
from .reports import COLLECT, FINAL, LEVEL, PrefixRequest, PrefixResponse

TOP_K, THRESHOLD = "top-k", "threshold"
SELECTIONS: tuple[str, ...] = (TOP_K, THRESHOLD)
INTERACTIVE, ONE_SHOT = "interactive", "one-shot"
COLLECTIONS: tuple[str, ...] = (INTERACTIVE, ONE_SHOT)
PARTITION_PURPOSE = "prefix.partition"
ORACLE_PURPOSE = "prefix.oracle"
_POSITIVE_63 = (1 << 63) - 1

if TYPE_CHECKING:
    from ...planning.commands import PlanCommand, Planner
    from ...planning.sizing import Sizing
    from ...postprocess import PostProcessor


def postprocessors() -> dict[str, PostProcessor]:
    """The post-processing methods by name, imported when first needed: they load scipy (a slow
    import), which a device importing this module to answer requests never uses."""
    from ...postprocess import POSTPROCESSORS

    return POSTPROCESSORS


@dataclass(frozen=True)
class SearchParameters:
    """Everything that fixes a prefix search, checked with errors naming the config key.

    ``segment_lengths[i]`` is η of level ``i + 1``; ``shares[i]`` the share
    of the users that level ``i + 1`` asks.  ``threshold`` is a fraction of
    the users (0 under threshold selection: the noise level, set so that
    about one absent prefix per level passes).  ``sketch_rows`` and
    ``sketch_width`` shape sketch oracles (0: the oracle's default).
    """

    protocol: str
    n_users: int
    epsilon: float
    encoding: Encoding
    start_length: int
    segment_lengths: tuple[int, ...]
    shares: tuple[float, ...]
    oracle: str
    candidates_per_step: int
    top_k: int
    selection: str
    threshold: float = 0.0
    postprocess: str = "base-pos"
    collection: str = INTERACTIVE
    sketch_rows: int = 0
    sketch_width: int = 0

    def __post_init__(self) -> None:
        check_users(self.n_users)
        check_epsilon(self.epsilon)
        if self.encoding not in ENCODINGS:
            raise InputError(f"protocol.encoding: got {self.encoding!r}; allowed: {list(ENCODINGS)}")
        check_positive_int(self.start_length, "protocol.start_length", minimum=0)
        if not self.segment_lengths:
            raise InputError("protocol.segment_length: at least one level is needed")
        for eta in self.segment_lengths:
            check_positive_int(eta, "protocol.segment_length")
        if len(self.shares) != len(self.segment_lengths):
            raise InputError(
                f"group shares: {len(self.shares)} given for {len(self.segment_lengths)} levels; one per level"
            )
        if any(not (math.isfinite(share) and share > 0) for share in self.shares):
            raise InputError(f"group shares: each must be a number > 0, got {list(self.shares)}")
        if abs(math.fsum(self.shares) - 1) > 1e-9:
            raise InputError(f"group shares: must add up to 1, got {math.fsum(self.shares)}")
        if len(self.segment_lengths) > self.n_users:
            raise InputError(
                f"protocol.segment_length: {len(self.segment_lengths)} levels (groups) for "
                f"population.users = {self.n_users}; every group needs users, so at most {self.n_users} levels"
            )
        if self.oracle not in ORACLE_NAMES:
            raise InputError(f"protocol.oracle: unknown name {self.oracle!r}; allowed: {list(ORACLE_NAMES)}")
        check_positive_int(self.candidates_per_step, "protocol.candidates_per_step")
        check_positive_int(self.top_k, "protocol.top_k")
        if self.selection not in SELECTIONS:
            raise InputError(f"protocol.selection: got {self.selection!r}; allowed: {list(SELECTIONS)}")
        if not (math.isfinite(self.threshold) and 0 <= self.threshold <= 1):
            raise InputError(f"protocol.threshold: must be a fraction of the users in [0, 1], got {self.threshold!r}")
        if self.postprocess not in postprocessors():
            raise InputError(f"protocol.postprocess: got {self.postprocess!r}; allowed: {list(postprocessors())}")
        if self.collection not in COLLECTIONS:
            raise InputError(f"protocol.collection: got {self.collection!r}; allowed: {list(COLLECTIONS)}")
        check_positive_int(self.sketch_rows, "protocol.sketch_rows", minimum=0)
        check_positive_int(self.sketch_width, "protocol.sketch_width", minimum=0)

    @property
    def levels(self) -> int:
        return len(self.segment_lengths)

    def lengths(self, value_length: int) -> np.ndarray:
        """Prefix length of each level, checked against the value length ``m``."""
        gamma, etas = self.start_length, self.segment_lengths
        if gamma + etas[0] > value_length:
            raise InputError(
                f"protocol.start_length + protocol.segment_length: γ + η = {gamma} + {etas[0]} exceeds "
                f"the value length m = {value_length}"
            )
        lengths = gamma + np.cumsum(etas)
        if lengths[-1] != value_length:
            raise InputError(
                f"protocol.segment_length: γ = {gamma} and segments {list(etas)} cover {int(lengths[-1])} "
                f"units; the levels must end at the value length m = {value_length}"
            )
        return lengths.astype(np.int64)


def uniform_segments(value_length: int, start_length: int, segment_length: int) -> tuple[int, ...]:
    """``g = ceil((m - γ) / η)`` segments of η units, the last one shorter if ``η`` does not divide ``m - γ``."""
    check_positive_int(start_length, "protocol.start_length", minimum=0)
    check_positive_int(segment_length, "protocol.segment_length")
    if start_length + segment_length > value_length:
        raise InputError(
            f"protocol.start_length + protocol.segment_length: γ + η = {start_length} + {segment_length} "
            f"exceeds the value length m = {value_length}"
        )
    remaining = value_length - start_length
    full, rest = divmod(remaining, segment_length)
    return (segment_length,) * full + ((rest,) if rest else ())


@dataclass
class LevelOutcome:
    """What one level found: its candidates, their estimates and the survivors."""

    rows: np.ndarray  # candidate prefixes [K, l]
    estimates: np.ndarray  # population-scale estimates [K]
    kept: np.ndarray  # indices of the survivors, best first


def public_seed(seed: int, purpose: str) -> int:
    """A non-negative 63-bit seed for public randomness, derived from the run seed."""
    return int(derive_key(seed, purpose)) & _POSITIVE_63


@dataclass(frozen=True)
class PrefixVariant:
    """One member of the family: its name and what it does where the family leaves a choice.

    The ``default_*`` values replace ``auto`` (and ``segment_length = 0``)
    in its ``[protocol]`` section; ``default_segment = None`` asks PEM's
    optimizer for γ, η and the group split.
    """

    name: str
    summary: str  # one line, for help texts and error messages
    final_pass: bool  # a last round of full-value reports estimates the survivors (TreeHist)
    default_oracle: str
    default_selection: str
    default_segment: int | None
    budget: BudgetRule  # how each user's ε is divided among its reports (one, or a level's and the full value's)
    planner: Planner | None = None  # ProtocolSpec.planner
    plan_command: PlanCommand | None = None  # ProtocolSpec.plan_command
    sizing: Sizing | None = None  # ProtocolSpec.sizing


class PrefixSearchServer(ServerProtocol):
    """The server side of a hierarchical prefix search (see the module docstring);
    a subclass names its :class:`PrefixVariant`."""

    variant: ClassVar[PrefixVariant]

    @property
    def final_pass(self) -> bool:
        return self.variant.final_pass

    def __init__(self, params: SearchParameters, codec: ItemCodec, seed: int) -> None:
        self.params = params
        self.codec = codec
        self.seed = seed
        self.encoding = PrefixEncoding(params.encoding, codec)
        self.lengths = params.lengths(self.encoding.length)
        self.split: BudgetSplit = self.variant.budget.split(self.variant.name, params.epsilon)
        self.level_epsilon = self.split.parts[0][1]
        self.final_epsilon = self.split.parts[1][1] if self.final_pass else 0.0
        self.bounds = np.concatenate(([0.0], np.cumsum(params.shares)))
        self.bounds[-1] = 1.0
        self.partition_seed = public_seed(seed, PARTITION_PURPOSE)
        self.oracle_seed = public_seed(seed, ORACLE_PURPOSE)
        self._oracles: dict[tuple[int, float], FrequencyOracle] = {}
        for level in range(params.levels):  # refuse an oracle that cannot serve a level now
            self.level_oracle(level)
        self.postprocessor = postprocessors()[params.postprocess]
        if self.postprocessor.needs_noise or (params.selection == THRESHOLD and params.threshold == 0):
            self._noise(self.reporting_oracle(), params.n_users, 1.0)  # refuse an oracle without a noise model now
        self._queries = self._planned_queries()
        self._candidates = self.encoding.extend(np.zeros((1, 0), dtype=np.int64), int(self.lengths[0]))
        self._outcomes: list[LevelOutcome] = []
        self._last_level_values: int | None = None  # candidates of the last level that can be items
        self._final_estimates: np.ndarray | None = None
        self._trace: list[RoundRecord] = []
        self._pending: PrefixRequest | None = None
        self._rounds = 0
        self._stopped_because: str | None = None

    # -- construction helpers -------------------------------------------------------

    def level_oracle(self, level: int) -> FrequencyOracle:
        """The oracle of a level (0-based), built on demand (cheap: public parameters only)."""
        return self._oracle(int(self.lengths[level]), self.level_epsilon)

    def final_oracle(self) -> FrequencyOracle:
        """The oracle of TreeHist's full-value reports."""
        return self._oracle(self.encoding.length, self.final_epsilon)

    def reporting_oracle(self) -> FrequencyOracle:
        """The oracle whose estimates the result reports."""
        return self.final_oracle() if self.final_pass else self.level_oracle(self.params.levels - 1)

    def _oracle(self, length: int, epsilon: float) -> FrequencyOracle:
        """The oracle of ``length``-unit prefixes at ``epsilon``, built once per server: a round
        asks for its level's oracle several times (decoding, selection, noise model), and
        building one expands its public hash functions."""
        oracle = self._oracles.get((length, epsilon))
        if oracle is None:
            oracle = self._oracles[length, epsilon] = self._build_oracle(length, epsilon)
        return oracle

    def _build_oracle(self, length: int, epsilon: float) -> FrequencyOracle:
        try:  # the process's shared oracle: shards simulated here answer the round with the same object
            return level_oracle(
                self.params.oracle,
                epsilon,
                self.encoding.domain(length),
                self.oracle_seed,
                self.params.sketch_rows,
                self.params.sketch_width,
            )
        except ValueError as error:
            if str(error).startswith("protocol."):
                raise
            raise InputError(
                f"protocol.oracle: {self.params.oracle!r} cannot serve prefixes of {length} "
                f"{self.encoding.unit_name} (domain {self.encoding.domain(length):,}): {error}"
            ) from None

    def _noise(self, oracle: FrequencyOracle, reports: float, scale: float) -> LinearVariance:
        """Noise of ``scale`` x an estimate from ``reports`` reports, as ``a + b c`` in population counts.

        ``Var(scale x est) = scale^2 (a_r + b c / scale)`` for a value held by
        ``c`` users of the population, ``c / scale`` of them among the reporters.
        """
        try:
            model = oracle.linear_variance(max(int(round(reports)), 1))
        except NotImplementedError:
            allowed = [name for name, method in postprocessors().items() if not method.needs_noise]
            raise InputError(
                f"protocol.postprocess / protocol.threshold: {self.params.postprocess!r} and the automatic "
                f"threshold need a noise model, which oracle {oracle.name!r} does not have; use "
                f"protocol.postprocess in {allowed} and protocol.threshold > 0"
            ) from None
        return LinearVariance(model.zero_count * scale**2, model.per_count * scale)

    # -- ServerProtocol -----------------------------------------------------------------

    @property
    def one_shot(self) -> bool:
        return self.params.collection == ONE_SHOT

    @property
    def max_rounds(self) -> int:
        return 1 if self.one_shot else self.params.levels + int(self.final_pass)

    @property
    def trace(self) -> list[RoundRecord]:
        return list(self._trace)

    def privacy_report(self) -> PrivacyReport:
        return ldp_report(self.split, self.params.oracle, self.describe())

    def progress_note(self) -> str:
        return f"level {len(self._outcomes)}/{self.params.levels}, {self._candidates.shape[0]:,} candidates next"

    @property
    def done(self) -> bool:
        return self._stopped_because is not None

    def next_request(self) -> PrefixRequest | None:
        if self.done:
            return None
        if self._pending is None:
            if self.one_shot:
                mode, level, candidates = COLLECT, -1, np.zeros(0, dtype=np.uint64)
            elif len(self._outcomes) < self.params.levels:
                mode, level = LEVEL, len(self._outcomes)
                candidates = self.encoding.keys(self._candidates)
            else:
                mode, level, candidates = FINAL, -1, self.encoding.keys(self._survivors())
            self._pending = self._request(mode, level, candidates)
        return self._pending

    def _request(self, mode: str, level: int, candidates: np.ndarray) -> PrefixRequest:
        return PrefixRequest(
            round=self._rounds + 1,
            mode=mode,
            level=level,
            levels=self.params.levels,
            encoding=self.params.encoding,
            lengths=self.lengths,
            level_bounds=self.bounds,
            partition_seed=self.partition_seed,
            oracle=self.params.oracle,
            epsilon=self.level_epsilon,
            final_epsilon=self.final_epsilon,
            oracle_seed=self.oracle_seed,
            sketch_rows=self.params.sketch_rows,
            sketch_width=self.params.sketch_width,
            candidates=candidates.astype(np.uint64),
        )

    def absorb(self, response: Response) -> None:
        if not isinstance(response, PrefixResponse):
            raise TypeError(f"{self.variant.name} expects a PrefixResponse, got {type(response).__name__}")
        pending = self._pending
        if pending is None:
            raise ValueError(f"response for round {response.round}, but no request is pending")
        if response.round != pending.round:
            raise ValueError(f"response for round {response.round}, but round {pending.round} is pending")
        self._pending = None
        self._rounds += 1
        if pending.mode == COLLECT:
            self._absorb_collection(response)
        elif pending.mode == LEVEL:
            values = self._finish_level(self._support(self.level_oracle(pending.level), response, pending))
            self._trace.append(RoundRecord(self._rounds, values, {"reporting_users": int(response.responding_users)}))
        else:
            self._finish_final(self._support(self.final_oracle(), response, pending), response.responding_users)

    # -- decoding -------------------------------------------------------------------------

    @staticmethod
    def _support(oracle: FrequencyOracle, response: PrefixResponse, request: PrefixRequest) -> Support:
        """The round's support, decoded once from the shards' summed counts."""
        return decode_counts(oracle, response.counts, response.reporters, request.candidates)

    def _absorb_collection(self, response: PrefixResponse) -> None:
        """Decode every level (and the final pass) from the one-shot report table."""
        rows = expand(response.report_rows, response.report_counts)
        level_of = rows[:, 0].astype(np.int64)
        template = self.level_oracle(0).randomize(np.zeros(1, dtype=np.uint64), np.random.default_rng(0))
        width = to_table(template).shape[1]
        steps = []
        for level in range(self.params.levels):
            oracle = self.level_oracle(level)
            reports = from_table(rows[level_of == level, 1 : 1 + width], template)
            statistics = oracle.aggregate(reports)
            steps.append(self._finish_level(oracle.support(statistics, self.encoding.keys(self._candidates))))
            if self.done:
                break
        values: dict[str, Any] = {"collection": ONE_SHOT, "users": int(response.sampled_users), "levels": steps}
        if self.final_pass and not self.done:
            oracle = self.final_oracle()
            statistics = oracle.aggregate(from_table(rows[:, 1 + width :], template))
            values["final"] = self._final_record(oracle.support(statistics, self.encoding.keys(self._survivors())))
        self._trace.append(RoundRecord(self._rounds, values, {"reports": int(rows.shape[0])}))

    def _threshold(self, oracle: FrequencyOracle, share: float, candidates: int) -> float | None:
        """The population-scale estimate a candidate needs to survive (None: top-k selection)."""
        if self.params.selection != THRESHOLD:
            return None
        if self.params.threshold > 0:
            return self.params.threshold * self.params.n_users
        from .selection_model import noise_threshold  # server side only: it loads scipy, which devices never need

        noise = self._noise(oracle, share * self.params.n_users, 1.0 / share)
        return noise_threshold(math.sqrt(noise.zero_count), candidates)

    def _finish_level(self, support: Support) -> dict[str, Any]:
        """Select the survivors of the current level and prepare the next level's candidates."""
        level = len(self._outcomes)
        share = float(self.params.shares[level])
        oracle = self.level_oracle(level)
        estimates = oracle.estimate_support(support) / share
        last = level == self.params.levels - 1
        limit = self.params.top_k if last and not self.final_pass else self.params.candidates_per_step
        threshold = self._threshold(oracle, share, self._candidates.shape[0])
        order = np.argsort(-estimates, kind="stable")
        if last:  # whole values: only those that can be an item compete for the output's places
            order = order[self.encoding.reportable(self._candidates[order])]
            self._last_level_values = order.size
        if threshold is not None:
            order = order[estimates[order] >= threshold]
        kept = order[:limit]
        self._outcomes.append(LevelOutcome(self._candidates, estimates, kept))
        values = self._record(
            level + 1,
            int(self.lengths[level]),
            share * self.params.n_users,
            self._candidates.shape[0],
            kept.size,
            threshold,
        )
        if kept.size == 0:
            self._candidates = self._candidates[:0]
            self._stopped_because = f"no prefix survived level {level + 1}"
        elif not last:
            step = int(self.lengths[level + 1] - self.lengths[level])
            self._candidates = self.encoding.extend(self._candidates[kept], step)
        elif not self.final_pass:
            self._stopped_because = f"all {self.params.levels} levels done"
        return values

    @staticmethod
    def _record(
        level: int | str, length: int, users: float, candidates: int, kept: int, threshold: float | None
    ) -> dict[str, Any]:
        """One trace line; every round has the same keys (threshold: None under top-k)."""
        return {
            "level": level,
            "prefix_length": length,
            "users": int(round(users)),
            "candidates": int(candidates),
            "kept": int(kept),
            "threshold": None if threshold is None else float(threshold),
        }

    def _survivors(self) -> np.ndarray:
        last = self._outcomes[-1]
        return last.rows[last.kept]

    def _final_record(self, support: Support) -> dict[str, Any]:
        """TreeHist's last step: everyone's full-value reports estimate the survivors."""
        self._final_estimates = self.final_oracle().estimate_support(support)
        self._stopped_because = f"all {self.params.levels} levels and the final estimation pass done"
        survivors = int(self._final_estimates.size)
        return self._record(
            "final", self.encoding.length, self.params.n_users, survivors, min(survivors, self.params.top_k), None
        )

    def _finish_final(self, support: Support, reporting: int) -> None:
        values = self._final_record(support)
        self._trace.append(RoundRecord(self._rounds, values, {"reporting_users": int(reporting)}))

    # -- result ---------------------------------------------------------------------------

    def _reported(self) -> tuple[np.ndarray, np.ndarray]:
        """(value rows, post-processed estimates) of the output, best first."""
        if not self._outcomes or self._outcomes[-1].kept.size == 0 or len(self._outcomes) < self.params.levels:
            return np.zeros((0, self.encoding.length), dtype=np.int64), np.zeros(0)
        last = self._outcomes[-1]
        if self.final_pass:
            if self._final_estimates is None:
                return np.zeros((0, self.encoding.length), dtype=np.int64), np.zeros(0)
            rows, raw = last.rows[last.kept], self._final_estimates
            reports, scale = float(self.params.n_users), 1.0
        else:
            rows, raw = last.rows, last.estimates
            share = float(self.params.shares[-1])
            reports, scale = share * self.params.n_users, 1.0 / share
        noise = self._noise(self.reporting_oracle(), reports, scale) if self.postprocessor.needs_noise else None
        processed = self.postprocessor(raw, float(self.params.n_users), noise)
        if self.final_pass:
            order = np.argsort(-raw, kind="stable")[: self.params.top_k]
            return rows[order], processed[order]
        return rows[last.kept], processed[last.kept]

    def discovered(self) -> list[Discovery]:
        rows, estimates = self._reported()
        found: dict[str, Discovery] = {}
        for row, estimate in zip(rows, estimates, strict=True):
            item = self.encoding.decode(row)
            if item and item not in found:  # the empty value stands for "no item"
                found[item] = Discovery(item, tuple(int(u) for u in row), estimated_count=float(estimate))
        return list(found.values())

    def describe(self) -> dict[str, Any]:
        """The run's parameters, as the result and the privacy report record them."""
        params = self.params
        described: dict[str, Any] = {
            **self.encoding.describe(),
            "levels": params.levels,
            "start_length": params.start_length,
            "segment_lengths": list(params.segment_lengths),
            "prefix_lengths": [int(length) for length in self.lengths],
            "group_shares": list(params.shares),
            "oracle": params.oracle,
            "level_epsilon": self.level_epsilon,
            "candidates_per_step": params.candidates_per_step,
            "top_k": params.top_k,
            "selection": params.selection,
            "postprocess": params.postprocess,
            "collection": params.collection,
            "queries": self._queries,
        }
        if self.final_pass:
            described["final_epsilon"] = self.final_epsilon
        if params.selection == THRESHOLD:
            described["threshold"] = params.threshold
        if params.sketch_rows or params.sketch_width:
            described["sketch"] = {"rows": params.sketch_rows, "width": params.sketch_width}
        return described

    def _planned_queries(self) -> int:
        """Most oracle queries the levels can make (every level full)."""
        space = self.encoding.space
        steps = np.diff(self.lengths)
        later = sum(self.params.candidates_per_step * space.segment_count(int(step)) for step in steps)
        return int(space.segment_count(int(self.lengths[0])) + later)

    def result(self) -> ProtocolResult:
        discoveries = self.discovered()
        return ProtocolResult(
            protocol=self.variant.name,
            discoveries=discoveries,
            frequent_prefixes=[],
            trace=self.trace,
            privacy=self.guarantee(),
            params=self.describe(),
            stopped_because=(self._stopped_because or "not finished") + self._shortfall(len(discoveries)),
        )

    def _shortfall(self, reported: int) -> str:
        """Why fewer than k values are reported, if they are (empty when k are)."""
        k = self.params.top_k
        if reported >= k:
            return ""
        if self._last_level_values is None:
            why = "the search stopped before the last level"
        elif self._last_level_values < k:
            why = f"the last level had only {self._last_level_values} candidates that can be items"
        else:
            why = "the others were below the threshold"
        return f"; {reported} of k = {k} values reported: {why}"


def level_shares(levels: int, weights: Sequence[float] | None = None) -> tuple[float, ...]:
    """Equal shares ([Wang19] Observation 2), or shares proportional to ``weights``."""
    if weights is None:
        return (1.0 / levels,) * levels
    total = math.fsum(weights)
    return tuple(float(w) / total for w in weights)
