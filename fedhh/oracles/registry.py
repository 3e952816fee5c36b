"""Oracles by name, for protocols and configs: ``make_oracle("olh", epsilon=2.0, domain=2**64)``.

Names and their options (keyword-only; unknown names and options are errors
that list what is allowed):

* ``grr`` / ``de``, ``sue`` / ``rappor``, ``oue``, ``blh``, ``olh``, ``hr``: none;
* ``flh``: ``hash_functions`` (k', default 1000), ``seed`` (names the public functions);
* ``hm``: ``coefficients`` (t, default 1);
* ``hashtogram``: ``rows`` (R, default 1), ``width`` (T, a power of two, default 1024), ``seed``,
  ``estimator`` (``mean``, unbiased, or ``median`` over rows);
* ``count-mean``, ``count-median``, ``count-min``, ``count-sketch``: ``rows`` (k),
  ``width`` (m), ``inner`` (an oracle name, default ``flh``), ``inner_options``,
  ``seed``; ``count-sketch`` also ``estimator`` (``median`` or ``mean``);
* ``cms``: count-mean over OUE (Apple's CMS); ``hcms``: count-mean over HM(1);
* ``count-sketch-hadamard`` (TreeHist's): ``rows`` (hash pairs t, default 15),
  ``width`` (m, a power of two, default 1024), ``seed``, ``estimator``.

Every name is listed once, in :data:`BASE_ORACLES` (oracles of the whole
domain, which sketches can also use per row) or :data:`SKETCHES`;
:data:`ORACLE_NAMES` is their union.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InputError
from .base import FrequencyOracle, check_positive_int
from .count_sketch_hadamard import CountSketchHadamard
from .direct import DirectEncoding
from .fast_local_hashing import FastLocalHashing
from .hadamard_mechanism import HadamardMechanism
from .hadamard_response import HadamardResponse
from .hashing import MAX_RANGE
from .hashtogram import Hashtogram
from .local_hashing import BinaryLocalHashing, OptimisedLocalHashing
from .sketches import SketchEstimator, SketchOracle
from .unary import OptimisedUnaryEncoding, SymmetricUnaryEncoding

BASE_ORACLES: dict[str, Callable[..., FrequencyOracle]] = {
    "grr": DirectEncoding,
    "de": DirectEncoding,
    "sue": SymmetricUnaryEncoding,
    "rappor": SymmetricUnaryEncoding,
    "oue": OptimisedUnaryEncoding,
    "blh": BinaryLocalHashing,
    "olh": OptimisedLocalHashing,
    "flh": FastLocalHashing,
    "hr": HadamardResponse,
    "hm": HadamardMechanism,
    "hashtogram": Hashtogram,
}


def _sketch(
    epsilon: float,
    domain: int,
    rows: int,
    width: int,
    inner: str,
    inner_options: Mapping[str, Any] | None,
    seed: int,
    estimator: SketchEstimator,
    signed: bool,
) -> SketchOracle:
    if inner not in BASE_ORACLES:
        raise InputError(f"inner must be one of {sorted(BASE_ORACLES)}, got {inner!r}")
    width = check_positive_int(width, "width", 2, MAX_RANGE)
    inner_domain = width * 2 if signed else width
    inner_oracle = make_oracle(inner, epsilon=epsilon, domain=inner_domain, **dict(inner_options or {}))
    return SketchOracle(inner_oracle, domain, rows, width, estimator=estimator, signed=signed, seed=seed)


def _sketch_over_any_rows(estimator: SketchEstimator) -> Callable[..., SketchOracle]:
    """The builder of an unsigned sketch whose server takes ``estimator`` over rows of any base oracle
    (``inner``, FLH by default)."""

    def build(
        epsilon: float,
        domain: int,
        rows: int = 16,
        width: int = 1024,
        inner: str = "flh",
        inner_options: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> SketchOracle:
        return _sketch(epsilon, domain, rows, width, inner, inner_options, seed, estimator, signed=False)

    return build


def _count_mean_over(inner: str) -> Callable[..., SketchOracle]:
    """The builder of Apple's count-mean sketch over rows of the base oracle ``inner``."""

    def build(epsilon: float, domain: int, rows: int = 16, width: int = 1024, seed: int = 0) -> SketchOracle:
        return _sketch(epsilon, domain, rows, width, inner, None, seed, "mean", signed=False)

    return build


def count_sketch(
    epsilon: float,
    domain: int,
    rows: int = 16,
    width: int = 1024,
    inner: str = "flh",
    inner_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    estimator: SketchEstimator = "median",
) -> SketchOracle:
    """The count sketch: signed rows of any base oracle, the server's estimator an option."""
    return _sketch(epsilon, domain, rows, width, inner, inner_options, seed, estimator, signed=True)


def count_sketch_hadamard(
    epsilon: float, domain: int, rows: int = 15, width: int = 1024, seed: int = 0, estimator: str = "median"
) -> CountSketchHadamard:
    """TreeHist's count sketch of Hadamard bits, ``rows`` hash pairs of ``width`` columns."""
    return CountSketchHadamard(epsilon, domain, hashes=rows, width=width, seed=seed, estimator=estimator)  # type: ignore[arg-type]


SKETCHES: dict[str, Callable[..., FrequencyOracle]] = {
    "count-mean": _sketch_over_any_rows("mean"),
    "count-median": _sketch_over_any_rows("median"),
    "count-min": _sketch_over_any_rows("min"),
    "count-sketch": count_sketch,
    "cms": _count_mean_over("oue"),  # Apple's Count-Mean Sketch, with OUE rows as in the survey
    "hcms": _count_mean_over("hm"),  # Apple's Hadamard Count-Mean Sketch: count-mean over HM(1) rows
    "count-sketch-hadamard": count_sketch_hadamard,
}

ORACLE_BUILDERS: dict[str, Callable[..., FrequencyOracle]] = {**BASE_ORACLES, **SKETCHES}
ORACLE_NAMES: tuple[str, ...] = tuple(sorted(ORACLE_BUILDERS))


def make_oracle(name: str, *, epsilon: float, domain: int, **options: Any) -> FrequencyOracle:
    """Build the oracle called ``name`` (see the module docstring for options)."""
    builder = ORACLE_BUILDERS.get(name)
    if builder is None:
        raise InputError(f"oracle: unknown name {name!r}; allowed: {list(ORACLE_NAMES)}")
    allowed = [option for option in inspect.signature(builder).parameters if option not in ("epsilon", "domain")]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InputError(f"oracle {name!r}: unknown option(s) {unknown}; allowed: {allowed}")
    return builder(epsilon=epsilon, domain=domain, **options)
