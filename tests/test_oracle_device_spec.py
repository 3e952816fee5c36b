"""Every oracle's device side, re-implemented from ``docs/messages.md`` alone, agrees with fedhh's oracles.

The device code below is numpy and hashlib only, written from the
document's text ("LDP oracles: what a device computes"), never calling
fedhh's randomizers or hash functions.  For every registered oracle name it

* randomizes a population of users from its own random generator, as a
  third-party device would;
* checks that fedhh's oracle gives each such report, for several values,
  exactly the probability the document's randomizer gives it (so the hash
  family, the keying of the public seeds and the flip probabilities are the
  same: a single wrong hash bucket changes a report's probability);
* checks that its flat statistics (when the oracle has them) and its
  support counts of the candidates are exactly fedhh's for the same reports,
  so a server decodes a third-party node's reply as it decodes its own;
* checks that fedhh's estimates from a larger population of such reports
  are within 5 standard deviations (fedhh's variance formula) of the truth,
  which catches a wrong distribution that every single report could have
  come from (say, randomised response that may "flip" to the true value);
* reads its reports back as fedhh's report objects through the columns that
  mode ``collect`` sends, in the documented order.

A new oracle name without a case here fails :func:`test_every_registered_oracle_is_covered`.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from fedhh.kernels.randomness import UserRandom
from fedhh.oracles import FrequencyOracle, Histogram, make_oracle
from fedhh.oracles.base import FLAT_CELLS_LIMIT
from fedhh.oracles.hashing import hash_keys, local_hash
from fedhh.oracles.keys import key_rows
from fedhh.oracles.registry import ORACLE_NAMES
from fedhh.protocols.prefix_search.report_table import from_table

U64 = np.uint64
ALL_ONES = U64(0xFFFFFFFFFFFFFFFF)


# -- the Definitions, from the text ------------------------------------------------------------------


def splitmix64(x: Any) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=U64) + U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def purpose_key(purpose: str) -> U64:
    return U64(int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little"))


def seed_lists(seed: int, purpose: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The public seeds and sign seeds ``0..count-1`` of a purpose."""
    base = splitmix64(U64(seed % (1 << 64)) ^ purpose_key(purpose))
    with np.errstate(over="ignore"):
        return splitmix64(base + np.arange(count, dtype=U64)), splitmix64((base ^ ALL_ONES) + np.arange(count, dtype=U64))


def seed_pair(sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return splitmix64(sigma) | U64(1), splitmix64(np.asarray(sigma, dtype=U64) ^ U64(0xD1B54A32D192ED03))


def hash64(sigma: np.ndarray, v: np.ndarray, g: int) -> np.ndarray:
    a, b = seed_pair(sigma)
    with np.errstate(over="ignore"):
        z = a * splitmix64(v) + b
    return ((z >> U64(32)) * U64(g)) >> U64(32)


def hash32(sigma: np.ndarray, v: np.ndarray, g: int) -> np.ndarray:
    a, b = seed_pair(sigma)
    a32, b32, k = (a >> U64(32)) | U64(1), b >> U64(32), splitmix64(v) >> U64(32)
    with np.errstate(over="ignore"):
        z = (a32 * k + b32) & U64(0xFFFFFFFF)
    return (z * U64(g)) >> U64(32)


def doc_key_rows(units: np.ndarray) -> np.ndarray:
    state = np.full(units.shape[0], splitmix64(purpose_key("fedhh.oracles.row-key") ^ U64(units.shape[1])), dtype=U64)
    for column in units.astype(np.int64).T:
        state = splitmix64(state ^ column.view(U64))
    return state


def parity(r: Any, c: Any) -> np.ndarray:
    return (np.bitwise_count(np.bitwise_and(np.asarray(r, dtype=U64), np.asarray(c, dtype=U64))) & 1).astype(np.int64)


def sign(r: Any, c: Any) -> np.ndarray:
    return 1 - 2 * parity(r, c)


def rr(rng: np.random.Generator, x: np.ndarray, k: int, p: float) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64)
    other = rng.integers(0, k - 1, size=x.shape)
    other += other >= x
    return np.where(rng.random(x.shape) < p, x, other)


def rr_probability(reported: np.ndarray, true: np.ndarray, k: int, p: float) -> np.ndarray:
    return np.where(np.asarray(reported, dtype=U64) == np.asarray(true, dtype=U64), p, (1 - p) / (k - 1))


def optimal_g(epsilon: float) -> int:
    return max(2, round(math.exp(epsilon)) + 1)


# -- the oracles, one device implementation each -------------------------------------------------------


@dataclass
class Device:
    """One oracle's device side: ``report`` -> fields in document order; ``probability``, ``flat``, ``support``."""

    epsilon: float
    d: int
    options: dict[str, Any] = field(default_factory=dict)

    def columns(self, report: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = []
        for value in report.values():
            if isinstance(value, dict):
                out += self.inner_device().columns(value)  # type: ignore[attr-defined]
            else:
                out += [value] if value.ndim == 1 else list(value.T)
        return out


class GRR(Device):
    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.d - 1)

    def report(self, v, rng):
        return {"values": rr(rng, v, self.d, self.p()).astype(U64)}

    def probability(self, value, report):
        return rr_probability(report["values"], value, self.d, self.p())

    def flat(self, report):
        return np.bincount(report["values"].astype(np.intp), minlength=self.d), np.array([len(report["values"])])

    def has_flat(self):
        return self.d <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        counts = (report["values"][:, None] == candidates[None, :]).sum(axis=0)
        return counts, np.array([len(report["values"])])


class Unary(Device):
    symmetric = True

    def thresholds(self) -> tuple[int, int]:
        if self.symmetric:
            half = math.exp(self.epsilon / 2)
            p, q = half / (half + 1), 1 / (half + 1)
        else:
            p, q = 0.5, 1 / (math.exp(self.epsilon) + 1)
        return min(math.floor(p * 2**32), 2**32 - 1), math.ceil(q * 2**32)

    def pq(self) -> tuple[float, float]:
        t_p, t_q = self.thresholds()
        return t_p / 2**32, t_q / 2**32

    def bits_of_words(self, v: np.ndarray, words: np.ndarray) -> np.ndarray:
        """The packed report rows of values ``v`` from ``ceil(d / 2)`` words per user."""
        t_p, t_q = self.thresholds()
        halves = np.empty((v.size, 2 * words.shape[1]), dtype=U64)
        halves[:, 0::2], halves[:, 1::2] = words & U64(0xFFFFFFFF), words >> U64(32)
        own = np.arange(self.d)[None, :] == v[:, None].astype(np.int64)
        bits = np.where(own, halves[:, : self.d] < t_p, halves[:, : self.d] < t_q)
        return np.packbits(bits, axis=1)

    def report(self, v, rng):
        return {"bits": self.bits_of_words(v, rng.integers(0, 1 << 64, size=(v.size, -(-self.d // 2)), dtype=U64))}

    def _bits(self, report):
        return np.unpackbits(report["bits"], axis=1, count=self.d).astype(bool)

    def probability(self, value, report):
        p, q = self.pq()
        bits = self._bits(report)
        own = np.arange(self.d) == value
        chances = np.where(own, np.where(bits, p, 1 - p), np.where(bits, q, 1 - q))
        return np.prod(chances, axis=1)

    def flat(self, report):
        bits = self._bits(report)
        return bits.sum(axis=0), np.array([bits.shape[0]])

    def has_flat(self):
        return self.d <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        bits = self._bits(report)
        return bits[:, candidates.astype(np.intp)].sum(axis=0), np.array([bits.shape[0]])


class OUE(Unary):
    symmetric = False


class LocalHash(Device):
    binary = False

    def g(self) -> int:
        return 2 if self.binary else optimal_g(self.epsilon)

    def p(self) -> float:
        e = math.exp(self.epsilon)
        return e / (e + self.g() - 1)

    def report(self, v, rng):
        seeds = rng.integers(0, 1 << 64, size=v.size, dtype=U64)
        return {"seeds": seeds, "buckets": rr(rng, hash32(seeds, v, self.g()), self.g(), self.p()).astype(np.uint32)}

    def probability(self, value, report):
        true = hash32(report["seeds"], U64(value), self.g())
        return 2.0**-64 * rr_probability(report["buckets"], true, self.g(), self.p())

    def has_flat(self):
        return False

    def support(self, report, candidates):
        hashed = hash32(report["seeds"][:, None], candidates[None, :], self.g())
        return (hashed == report["buckets"][:, None]).sum(axis=0), np.array([report["seeds"].size])


class BLH(LocalHash):
    binary = True


class FLH(Device):
    def params(self) -> tuple[int, int, np.ndarray, float]:
        functions = self.options.get("hash_functions", 1000)
        g = optimal_g(self.epsilon)
        seeds, _ = seed_lists(self.options.get("seed", 0), "fedhh.oracles.flh.functions", functions)
        e = math.exp(self.epsilon)
        return functions, g, seeds, e / (e + g - 1)

    def report(self, v, rng):
        functions, g, seeds, p = self.params()
        j = rng.integers(0, functions, size=v.size)
        return {"functions": j.astype(np.uint32), "buckets": rr(rng, hash64(seeds[j], v, g), g, p).astype(np.uint32)}

    def probability(self, value, report):
        functions, g, seeds, p = self.params()
        true = hash64(seeds[report["functions"].astype(np.intp)], U64(value), g)
        return rr_probability(report["buckets"], true, g, p) / functions

    def flat(self, report):
        functions, g, _, _ = self.params()
        cells = report["functions"].astype(np.int64) * g + report["buckets"]
        return np.bincount(cells, minlength=functions * g), np.array([cells.size])

    def has_flat(self):
        functions, g, _, _ = self.params()
        return functions * g <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        _, g, seeds, _ = self.params()
        hashed = hash64(seeds[report["functions"].astype(np.intp)][:, None], candidates[None, :], g)
        return (hashed == report["buckets"][:, None]).sum(axis=0), np.array([report["buckets"].size])


class HR(Device):
    def params(self) -> tuple[int, int, int, float, float]:
        e = math.exp(self.epsilon)
        blocks = 1 if self.epsilon <= 1 else 2 ** math.floor(math.log2(math.floor(min(2 * self.d, e))))
        b = 2 ** (-(-self.d // blocks)).bit_length()
        return blocks, b, blocks * b, 2 * blocks - 1 + e, e

    def locate(self, v):
        _, b, _, _, _ = self.params()
        v = np.asarray(v, dtype=U64)
        return v // U64(b - 1), v % U64(b - 1) + U64(1)

    def report(self, v, rng):
        blocks, b, outputs, z, _ = self.params()
        beta, pi = self.locate(v)
        r = rng.integers(0, b, size=v.size, dtype=U64)
        while np.any(bad := parity(pi, r) == 1):  # uniform over the positive set, by rejection
            r[bad] = rng.integers(0, b, size=int(bad.sum()), dtype=U64)
        anywhere = rng.random(v.size) < 2 * blocks / z
        return {"indices": np.where(anywhere, rng.integers(0, outputs, size=v.size, dtype=U64), beta * U64(b) + r)}

    def probability(self, value, report):
        blocks, b, outputs, z, _ = self.params()
        beta, pi = self.locate(np.array([value]))
        x = report["indices"]
        positive = ((x // U64(b)) == beta[0]) & (parity(pi[0], x % U64(b)) == 0)
        return 2 * blocks / (z * outputs) + positive * (1 - 2 * blocks / z) * 2 / b

    def flat(self, report):
        _, _, outputs, _, _ = self.params()
        return np.bincount(report["indices"].astype(np.intp), minlength=outputs), np.array([report["indices"].size])

    def has_flat(self):
        return self.params()[2] <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        _, b, _, _, _ = self.params()
        beta, pi = self.locate(candidates)
        x = report["indices"][:, None]
        inside = (x >= beta * U64(b)) & (x < (beta + U64(1)) * U64(b))
        offsets = np.where(inside, x - beta * U64(b), U64(0))
        return np.where(inside, sign(pi[None, :], offsets), 0).sum(axis=0), np.array([x.shape[0]])


class HM(Device):
    def params(self) -> tuple[int, int, float]:
        t = self.options.get("coefficients", 1)
        e = math.exp(self.epsilon)
        return t, 2 ** (self.d - 1).bit_length(), e / (e + 2**t - 1)

    def report(self, v, rng):
        t, rows, p = self.params()
        j = rng.integers(0, rows, size=(v.size, t), dtype=U64)
        w = (parity(j, v[:, None]) << np.arange(t)).sum(axis=1)
        return {"indices": j, "words": rr(rng, w, 2**t, p).astype(np.uint32)}

    def probability(self, value, report):
        t, rows, p = self.params()
        w = (parity(report["indices"], U64(value)) << np.arange(t)).sum(axis=1)
        return rr_probability(report["words"], w, 2**t, p) / float(rows) ** t

    def _signs(self, report):
        t = self.params()[0]
        return 1 - 2 * ((report["words"][:, None].astype(np.int64) >> np.arange(t)) & 1)

    def flat(self, report):
        rows = self.params()[1]
        sums = np.bincount(report["indices"].ravel().astype(np.intp), weights=self._signs(report).ravel(), minlength=rows)
        return np.rint(sums).astype(np.int64), np.array([report["words"].size])

    def has_flat(self):
        return self.params()[1] <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        signs = self._signs(report)[:, :, None] * sign(report["indices"][:, :, None], candidates[None, None, :])
        return signs.sum(axis=(0, 1)), np.array([report["words"].size])


class SignedBit(Device):
    """Hashtogram and TreeHist's count sketch: a row, a Hadamard index and one randomised bit."""

    default_rows = 1
    fields = ("", "", "")  # the report's field names: row, Hadamard index, bit

    def params(self) -> tuple[int, int, float]:
        e = math.exp(self.epsilon)
        return self.options.get("rows", self.default_rows), self.options.get("width", 1024), e / (1 + e)

    def bucket_sign(self, row: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def report(self, v, rng):
        rows, width, p = self.params()
        r = rng.integers(0, rows, size=v.size)
        s = rng.integers(0, width, size=v.size)
        bucket, negative = self.bucket_sign(r, v)
        honest = negative ^ parity(s, bucket)
        flipped = rng.random(v.size) >= p
        return dict(zip(self.fields, (r.astype(np.uint32), s.astype(np.uint32), (honest ^ flipped).astype(np.uint8))))

    def probability(self, value, report):
        rows, width, p = self.params()
        r, s, y = (report[name] for name in self.fields)
        bucket, negative = self.bucket_sign(r.astype(np.intp), np.full(r.size, value, dtype=U64))
        honest = negative ^ parity(s, bucket)
        return np.where(honest == y, p, 1 - p) / (rows * width)

    def flat(self, report):
        rows, width, _ = self.params()
        r, s, y = (report[name].astype(np.int64) for name in self.fields)
        sums = np.bincount(r * width + s, weights=1 - 2 * y, minlength=rows * width)
        return np.rint(sums).astype(np.int64), np.bincount(r, minlength=rows)

    def has_flat(self):
        rows, width, _ = self.params()
        return rows * width <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        rows, _, _ = self.params()
        r, s, y = (report[name].astype(np.int64) for name in self.fields)
        counts = np.zeros((rows, candidates.size), dtype=np.int64)
        for row in range(rows):
            mine = r == row
            bucket, negative = self.bucket_sign(np.full(candidates.size, row), candidates)
            total = ((1 - 2 * y[mine])[:, None] * sign(s[mine][:, None], bucket[None, :])).sum(axis=0)
            counts[row] = (1 - 2 * negative) * total
        return counts.ravel(), np.bincount(r, minlength=rows)


class Hashtogram(SignedBit):
    fields = ("rows", "indices", "negative")

    def bucket_sign(self, row, v):
        rows, width, _ = self.params()
        if self.d <= width:
            return np.asarray(v, dtype=U64), np.zeros(np.shape(v), dtype=np.int64)
        seeds, _ = seed_lists(self.options.get("seed", 0), "fedhh.oracles.hashtogram.rows", rows)
        return hash64(seeds[row], v, width), np.zeros(np.shape(v), dtype=np.int64)


class CountSketchHadamard(SignedBit):
    default_rows = 15
    fields = ("hashes", "rows", "negative")

    def bucket_sign(self, row, v):
        rows, width, _ = self.params()
        seeds, signs = seed_lists(self.options.get("seed", 0), "fedhh.protocols.count-sketch-hadamard", rows)
        return hash64(seeds[row], v, width), hash64(signs[row], v, 2).astype(np.int64)


INNER = {"flh": FLH, "oue": OUE, "hm": HM}


class Sketch(Device):
    inner_name = "flh"
    signed = False

    def params(self) -> tuple[int, int, np.ndarray, np.ndarray]:
        rows, width = self.options.get("rows", 16), self.options.get("width", 1024)
        seeds, signs = seed_lists(self.options.get("seed", 0), "fedhh.oracles.sketch.rows", rows)
        return rows, width, seeds, signs

    def inner_device(self) -> Device:
        width = self.params()[1]
        return INNER[self.inner_name](self.epsilon, 2 * width if self.signed else width)

    def symbols(self, row, v):
        _, width, seeds, signs = self.params()
        symbol = hash64(seeds[row], v, width)
        return symbol + U64(width) * hash64(signs[row], v, 2) if self.signed else symbol

    def report(self, v, rng):
        rows = self.params()[0]
        j = rng.integers(0, rows, size=v.size)
        return {"rows": j.astype(np.uint32), "inner": self.inner_device().report(self.symbols(j, v), rng)}

    @staticmethod
    def _take(report: dict[str, np.ndarray], members: np.ndarray) -> dict[str, np.ndarray]:
        return {name: column[members] for name, column in report.items()}

    def probability(self, value, report):
        rows = self.params()[0]
        out = np.empty(report["rows"].size)
        for row in range(rows):
            members = np.flatnonzero(report["rows"] == row)
            symbol = int(self.symbols(np.array([row]), np.array([value], dtype=U64))[0])
            out[members] = self.inner_device().probability(symbol, self._take(report["inner"], members))
        return out / rows

    def flat(self, report):
        rows = self.params()[0]
        parts = [self.inner_device().flat(self._take(report["inner"], report["rows"] == row)) for row in range(rows)]
        return np.concatenate([cells for cells, _ in parts]), np.concatenate([users for _, users in parts])

    def has_flat(self):
        inner = self.inner_device()
        if not inner.has_flat():
            return False
        inner_cells = inner.flat(inner.report(np.zeros(0, dtype=U64), np.random.default_rng(0)))[0].size
        return self.params()[0] * inner_cells <= FLAT_CELLS_LIMIT

    def support(self, report, candidates):
        rows, width, _, _ = self.params()
        counts, reporters = [], []
        for row in range(rows):
            mine = self._take(report["inner"], report["rows"] == row)
            own = self.symbols(np.full(candidates.size, row), candidates)
            halves = [own] + ([np.where(own < U64(width), own + U64(width), own - U64(width))] if self.signed else [])
            counts.append([self.inner_device().support(mine, half)[0] for half in halves])
            reporters.append(int((report["rows"] == row).sum()))
        return np.asarray(counts).ravel(), np.array(reporters)


def sketch(inner: str, signed: bool = False) -> type[Sketch]:
    return type(f"Sketch_{inner}", (Sketch,), {"inner_name": inner, "signed": signed})


DEVICES: dict[str, type[Device]] = {
    "grr": GRR, "de": GRR, "sue": Unary, "rappor": Unary, "oue": OUE, "olh": LocalHash, "blh": BLH, "flh": FLH,
    "hr": HR, "hm": HM, "hashtogram": Hashtogram, "count-sketch-hadamard": CountSketchHadamard,
    "count-mean": sketch("flh"), "count-median": sketch("flh"), "count-min": sketch("flh"),
    "count-sketch": sketch("flh", signed=True), "cms": sketch("oue"), "hcms": sketch("hm"),
}
FULL = 1 << 64
SKETCH = {"rows": 4, "width": 32, "seed": 3}
CASES: list[tuple[str, float, int, dict[str, Any]]] = [
    ("grr", 1.5, 50, {}), ("de", 3.0, 7, {}),
    ("sue", 1.0, 50, {}), ("rappor", 2.0, 13, {}), ("oue", 2.0, 50, {}),
    ("olh", 2.0, FULL, {}), ("olh", 0.5, FULL, {}), ("blh", 1.0, FULL, {}),
    ("flh", 2.0, FULL, {"hash_functions": 50, "seed": 7}), ("flh", 1.0, 1000, {}),
    ("hr", 2.0, 50, {}), ("hr", 0.5, 50, {}), ("hr", 3.0, 1 << 22, {}),
    ("hm", 2.0, 50, {"coefficients": 3}), ("hm", 1.0, 1 << 40, {"coefficients": 2}),
    ("hashtogram", 2.0, FULL, {"rows": 3, "width": 64, "seed": 5}), ("hashtogram", 2.0, 30, {"width": 64}),
    ("hashtogram", 1.0, 64, {"rows": 2, "width": 64}),
    ("count-sketch-hadamard", 2.0, FULL, {"rows": 5, "width": 32, "seed": 9}),
    ("count-mean", 2.0, FULL, SKETCH), ("count-median", 1.0, FULL, SKETCH), ("count-min", 2.0, FULL, SKETCH),
    ("count-sketch", 2.0, FULL, SKETCH), ("cms", 2.0, FULL, SKETCH), ("hcms", 2.0, FULL, SKETCH),
]


def population(d: int, rng: np.random.Generator, users: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Users' values drawn from a few keys, and candidates: those keys and as many others."""
    pool = rng.choice(min(d, 1 << 62), size=min(d, 24), replace=False).astype(U64) if d < FULL else rng.integers(
        0, FULL, size=24, dtype=U64)
    values = pool[: max(1, pool.size // 2)][rng.integers(0, max(1, pool.size // 2), size=users)]
    return values, pool


def test_every_registered_oracle_is_covered() -> None:
    assert set(DEVICES) == set(ORACLE_NAMES)
    assert {name for name, *_ in CASES} == set(ORACLE_NAMES)


def test_hash_families_and_keys_are_fedhh_s() -> None:
    rng = np.random.default_rng(11)
    seeds, keys = rng.integers(0, FULL, size=200, dtype=U64), rng.integers(0, FULL, size=200, dtype=U64)
    for g in (2, 3, 8, 1000, 1 << 31):
        assert np.array_equal(hash64(seeds, keys, g), hash_keys(seeds, keys, g))
        assert np.array_equal(hash32(seeds, keys, g), local_hash(seeds, keys, g))
    units = rng.integers(0, 1 << 40, size=(50, 9))
    assert np.array_equal(doc_key_rows(units), key_rows(units))
    assert np.array_equal(doc_key_rows(units[:, :3] % 2), key_rows((units[:, :3] % 2).astype(np.uint8)))


def fedhh_reports(oracle: FrequencyOracle, device: Device, report: dict[str, Any]) -> Any:
    """The device's reports as fedhh's report object, through the columns mode ``collect`` sends."""
    template = oracle.randomize(np.zeros(1, dtype=U64), np.random.default_rng(0))
    table = np.stack([np.asarray(column).astype(U64) for column in device.columns(report)], axis=1)
    return from_table(table, template)


@pytest.mark.parametrize(("name", "epsilon", "d", "options"), CASES, ids=lambda case: str(case))
def test_a_device_following_the_document_reports_as_fedhh_decodes(
    name: str, epsilon: float, d: int, options: dict[str, Any]
) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((name, epsilon, d)).encode()))
    oracle = make_oracle(name, epsilon=epsilon, domain=d, **options)
    device = DEVICES[name](epsilon, d, dict(options))
    values, candidates = population(d, rng)
    report = device.report(values, rng)
    reports = fedhh_reports(oracle, device, report)

    for value in candidates[:6]:
        assert np.allclose(oracle.report_probabilities(int(value), reports), device.probability(int(value), report),
                           rtol=1e-12, atol=0), f"{name}: report probabilities of value {value}"

    statistics = oracle.aggregate(reports)
    assert (oracle.flat_size() is not None) == device.has_flat()
    if device.has_flat():
        cells, reporters = oracle.to_flat(statistics)
        mine_cells, mine_reporters = device.flat(report)
        assert np.array_equal(cells, mine_cells) and np.array_equal(reporters, mine_reporters)
    support = oracle.support(statistics, candidates)
    mine_counts, mine_reporters = device.support(report, candidates)
    assert np.array_equal(support.counts.ravel(), mine_counts)
    assert np.array_equal(np.atleast_1d(support.n_users), mine_reporters)


@pytest.mark.parametrize(("name", "epsilon", "d"), [("sue", 1.0, 50), ("rappor", 0.5, 7), ("oue", 2.0, 1024), ("oue", 4.0, 515)])
def test_unary_reports_are_the_documented_bits_of_their_words(name: str, epsilon: float, d: int) -> None:
    """fedhh's unary randomizer maps its words to bits as the document says (32-bit halves, low half
    first, against ``T_p`` and ``T_q``): given the same words, the packed rows are identical.  The words
    come from ``UserRandom``, whose ``j``-th word of a user is the same however many calls draw it."""
    users = np.arange(400)
    values = np.random.default_rng(d).integers(0, d, users.size).astype(U64)
    key = U64(0x5EED)
    words = UserRandom(key, users).words(-(-d // 2))
    mine = DEVICES[name](epsilon, d).bits_of_words(values, words)  # type: ignore[attr-defined]
    theirs = make_oracle(name, epsilon=epsilon, domain=d).randomize(values, UserRandom(key, users)).bits
    assert np.array_equal(mine, theirs)


# sketches whose estimator has no closed-form variance; their rows' device side is the exact test's
NO_VARIANCE = ("count-median", "count-min", "count-sketch")


@pytest.mark.parametrize(
    ("name", "epsilon", "d", "options"), [case for case in CASES if case[0] not in NO_VARIANCE], ids=lambda case: str(case)
)
def test_fedhh_s_estimates_from_such_devices_are_unbiased(
    name: str, epsilon: float, d: int, options: dict[str, Any]
) -> None:
    oracle = make_oracle(name, epsilon=epsilon, domain=d, **options)
    rng = np.random.default_rng(zlib.crc32(repr(("estimates", name, epsilon, d)).encode()))
    values, candidates = population(d, rng, users=3000)
    variance = oracle.variance(candidates, Histogram.of(values))
    device = DEVICES[name](epsilon, d, dict(options))
    report = device.report(values, rng)
    estimates = oracle.estimate(oracle.aggregate(fedhh_reports(oracle, device, report)), candidates)
    truth = Histogram.of(values).lookup(candidates)
    assert np.all(np.abs(estimates - truth) <= 5 * np.sqrt(variance)), f"{name}: {estimates - truth}"
