"""SFP's public encoding: words as fragments at positions with an 8-bit hash of the whole word, and the sketches."""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from ...data.items import ItemCodec
from ...data.population import Vocabulary
from ...kernels.randomness import UserRandom, splitmix64
from ...oracles import make_oracle
from ...oracles.sketches import SketchOracle
from ..common.prefix_encoding import PrefixEncoding
from .parameters import HASH_VALUES


@dataclass(frozen=True)
class FragmentCodec:
    """How values become fragments, hashes and word keys (public, the same on every device)."""

    codec: ItemCodec
    fragment_length: int
    hash_seed: int

    @property
    def encoding(self) -> PrefixEncoding:
        return PrefixEncoding("symbols", self.codec)

    @property
    def positions(self) -> int:
        return self.codec.max_symbols // self.fragment_length

    @property
    def fragment_values(self) -> int:
        return self.encoding.base**self.fragment_length

    def fragments(self, rows: np.ndarray) -> np.ndarray:
        """``[K, P]`` base-``B`` value of each fragment of value rows ``[K, U]``."""
        digits = rows.reshape(rows.shape[0], self.positions, self.fragment_length).astype(np.int64)
        weights = self.encoding.base ** np.arange(self.fragment_length - 1, -1, -1, dtype=np.int64)
        return digits @ weights

    def unfragment(self, fragments: np.ndarray) -> np.ndarray:
        """Value rows ``[K, U]`` from fragment values ``[K, P]``."""
        powers = self.encoding.base ** np.arange(self.fragment_length - 1, -1, -1, dtype=np.int64)
        digits = (fragments[:, :, None] // powers) % self.encoding.base
        return digits.reshape(fragments.shape[0], -1)

    def word_keys(self, rows: np.ndarray) -> np.ndarray:
        return self.encoding.keys(rows)

    def word_hashes(self, keys: np.ndarray) -> np.ndarray:
        """Apple's 8-bit hash of the whole word, keyed by a public seed."""
        return (splitmix64(keys ^ np.uint64(self.hash_seed)) >> np.uint64(56)).astype(np.int64)


_VALUE_CACHE: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}


def vocabulary_values(fragments: FragmentCodec, vocabulary: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Per vocabulary item, then the empty value (users without an item): the fragment-report
    keys ``[V + 1, P]`` (fragment x 256 + hash) and the word keys ``[V + 1]``; once per vocabulary."""
    cache_key = (id(vocabulary), fragments.fragment_length, fragments.hash_seed)
    cached = _VALUE_CACHE.get(cache_key)
    if cached is None:
        units = fragments.encoding.units(vocabulary)
        rows = np.concatenate([units, np.zeros((1, units.shape[1]), dtype=units.dtype)])
        words = fragments.word_keys(rows)
        reports = fragments.fragments(rows) * HASH_VALUES + fragments.word_hashes(words)[:, None]
        cached = _VALUE_CACHE[cache_key] = (reports.astype(np.uint64), words)
        weakref.finalize(vocabulary, _VALUE_CACHE.pop, cache_key, None)
    return cached


def user_positions(position_seed: int, positions: int, user_ids: np.ndarray) -> np.ndarray:
    """Each global user's fragment position (public randomness, sent in the clear)."""
    return UserRandom(np.uint64(position_seed), np.asarray(user_ids)).integers(0, positions)


@functools.lru_cache(maxsize=4)
def sketch(name: str, epsilon: float, domain: int, rows: int, width: int, seed: int) -> SketchOracle:
    """A sketch oracle built from public parameters (its hash functions expanded once per process)."""
    oracle = make_oracle(name, epsilon=epsilon, domain=domain, rows=rows, width=width, seed=seed)
    assert isinstance(oracle, SketchOracle)  # cms and hcms
    return oracle
