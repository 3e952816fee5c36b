"""Where a population's items come from: wordfreq, synthetic Zipf or exponential, a file, or a built dataset.

Sampled sources (wordfreq, Zipf, exponential) never materialise the whole
population to build one shard: user ``u``'s ``j``-th item is drawn by
inverse CDF from a uniform keyed by (seed, u, j), so a shard builds only its
own users, and any shard count yields the same users.  How alike one user's
words are (``population.concentration``) is :mod:`fedhh.data.user_words`;
what a user keeps of them (``population.per_user``),
:mod:`fedhh.data.per_user`.  File sources are read once per process
and sliced.  Dataset sources (:mod:`fedhh.data.store`) read a
population written to disk by ``fedhh population build``, a range of users
at a time.
"""

from __future__ import annotations

import copy
import csv
import functools
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError
from ..kernels.randomness import UserRandom, derive_key
from ..kernels.sampling import InverseCdf
from ..schema import party_languages
from . import cache
from .deny_list import DeniedItemsSource, DenyList
from .items import ALPHABETS, EncodingReport, ItemCodec, ItemError
from .per_user import keep_per_user
from .population import PopulationCounts, PopulationSource, Shard, SingleItemShard, Vocabulary
from .store import MANIFEST, cached_dataset_source
from .table_errors import CSV_BLOCK_BYTES, check_columns, check_csv_rows, check_utf8, unreadable
from .user_words import URN_PURPOSE, expected_distinct_items, polya_urn_words

POPULATION_PURPOSE = "population.items"
ZIPF_STRINGS_PURPOSE = "population.zipf_strings"


DRAW_CHUNK_USERS = 1 << 18  # users whose items are drawn at once: the draw's temporary arrays stay a few MB


BeforeEncoding = Callable[[int], None]  # called with the number of users before a vocabulary is encoded


class SampledSource(PopulationSource):
    """Users draw ``words_per_user`` items from a distribution over candidates: i.i.d., or with
    ``concentration`` α > 0 each user's from a Dirichlet(α p) law of its own
    (:mod:`fedhh.data.user_words`).

    The population size is the config's, known before anything is built:
    the memory the candidates' encoding needs is checked first, then
    ``before_encoding(n_users)`` runs (:class:`fedhh.experiment.Experiment`
    solves the privacy target there), and only then is the vocabulary encoded.
    """

    def __init__(
        self,
        candidates: list[str],
        probabilities: np.ndarray,
        n_users: int,
        words_per_user: int,
        codec: ItemCodec,
        seed: int,
        before_encoding: BeforeEncoding | None = None,
        concentration: float = 0.0,
    ) -> None:
        if concentration < 0 or not np.isfinite(concentration):
            raise InputError(f"population.concentration: got {concentration!r}; must be 0 or a finite number > 0")
        self.n_users = n_users
        self.words_per_user = words_per_user
        self.concentration = concentration
        self.seed = seed
        codec.require_memory_to_encode(candidates)
        if before_encoding is not None:
            before_encoding(n_users)
        self.vocabulary, self._candidate_item = self._encode(candidates, codec)
        cdf = np.cumsum(probabilities, dtype=np.float64)
        self._pick = InverseCdf(cdf / cdf[-1])

    def _encode(self, candidates: list[str], codec: ItemCodec) -> tuple[Vocabulary, np.ndarray]:
        """The candidates' vocabulary and each candidate's item id (:meth:`Vocabulary.encode`)."""
        return Vocabulary.encode(candidates, codec)

    def with_users(self, n_users: int) -> SampledSource:
        """The same distribution over the same encoded vocabulary for ``n_users`` users (sweeps
        over the population size encode the vocabulary and index its prefixes once); the first
        ``min(n, n')`` users are the same in both."""
        resized = copy.copy(self)
        resized.n_users = n_users
        return resized

    def item_law(self) -> np.ndarray | None:
        """The law of a user's one item: entry 0 the probability of holding nothing (a candidate
        the codec dropped), entry ``1 + i`` that of item id ``i``, as :meth:`build_users` draws
        it (inverse CDF of 53-bit uniforms, the last candidate taking the CDF's rounding);
        ``None`` when users draw several items (a law simulation then counts built users)."""
        if self.words_per_user != 1:
            return None
        return self._law_of(self._pick)

    def range_laws(self, start: int, stop: int) -> list[tuple[int, int, np.ndarray]] | None:
        """The users ``[start, stop)`` as consecutive ranges of one item law each (entries as in
        :meth:`item_law`), or ``None`` when users draw several items."""
        law = self.item_law()
        return None if law is None else [(start, stop, law)]

    def _law_of(self, pick: InverseCdf) -> np.ndarray:
        """The law of the item one draw through ``pick`` gives (entry 0: none, ``1 + i``: item ``i``)."""
        cdf = np.minimum(pick.cdf, 1.0)
        cdf[-1] = 1.0
        candidate = np.diff(cdf, prepend=0.0)
        law = np.bincount(self._candidate_item + 1, weights=candidate, minlength=self.vocabulary.size + 1)
        return law / law.sum()

    def build_users(self, start: int, stop: int) -> Shard:
        if self.words_per_user == 1:
            return SingleItemShard(self.vocabulary, start, self._single_items(start, stop))
        picks = self._draw_items(start, stop)
        local_users = np.tile(np.arange(stop - start), self.words_per_user)
        return Shard.from_pairs(self.vocabulary, start, stop - start, local_users, np.concatenate(picks))

    def _draw_items(self, start: int, stop: int) -> list[np.ndarray]:
        """Item ids of users ``[start, stop)``, one array per word a user draws (``-1``: a
        candidate the codec dropped): independent draws, or with a concentration, the Pólya urn
        over the same draws (:func:`fedhh.data.user_words.polya_urn_words`)."""
        users = np.arange(start, stop)
        draws = UserRandom(derive_key(self.seed, POPULATION_PURPOSE), users)
        fresh = (
            self._candidate_item[np.minimum(self._pick(draws.random()), self._candidate_item.size - 1)]
            for _ in range(self.words_per_user)
        )
        if self.concentration > 0 and self.words_per_user > 1:
            urn = UserRandom(derive_key(self.seed, URN_PURPOSE), users)
            return list(polya_urn_words(fresh, self.words_per_user, urn, self.concentration))
        return list(fresh)

    def _single_items(self, start: int, stop: int) -> np.ndarray:
        """Each user's one item id (``-1`` for none) as one array of 4 bytes a user, drawn a chunk
        of users at a time so that the draw's 8-byte temporaries never span the whole range."""
        items = np.empty(stop - start, dtype=np.int32 if self.vocabulary.size < 1 << 31 else np.int64)
        for first in range(start, stop, DRAW_CHUNK_USERS):
            last = min(first + DRAW_CHUNK_USERS, stop)
            items[first - start : last - start] = self._draw_items(first, last)[0]
        return items

    def _base_description(self) -> dict[str, Any]:
        return {
            "users": self.n_users,
            "words_per_user": self.words_per_user,
            **({"concentration": self.concentration} if self.concentration > 0 else {}),
            "vocabulary": self.vocabulary.size,
            "encoding": self.vocabulary.encoding.to_dict(),
        }


class WordfreqSource(SampledSource):
    """Real word frequencies from the ``wordfreq`` package (bundled, no download).

    The candidates are the ``vocabulary_size`` most frequent words made only
    of the alphabet's characters (wordfreq lists also contain numbers,
    punctuation and other scripts, which a lowercase alphabet cannot carry).
    """

    def __init__(
        self,
        n_users: int,
        language: str,
        vocabulary_size: int,
        words_per_user: int,
        codec: ItemCodec,
        seed: int,
        before_encoding: BeforeEncoding | None = None,
        concentration: float = 0.0,
    ) -> None:
        words, frequencies = wordfreq_candidates(language, vocabulary_size, codec.alphabet.name)
        self.language = language
        self._candidates_key = _candidates_key(language, vocabulary_size, codec.alphabet.name)
        super().__init__(words, frequencies, n_users, words_per_user, codec, seed, before_encoding, concentration)

    def _encode(self, candidates: list[str], codec: ItemCodec) -> tuple[Vocabulary, np.ndarray]:
        """Kept in fedhh's cache under the candidates' key and the codec: reading the encoded
        words back costs a fraction of encoding them and finding the distinct rows."""
        key = (
            None
            if self._candidates_key is None
            else {**self._candidates_key, "vocabulary_format": VOCABULARY_FORMAT, "codec": codec.describe()}
        )
        stored = cache.load("vocabulary", key) if key is not None else None
        if stored is not None:
            try:
                return _vocabulary_from_arrays(stored, codec), stored["candidate_item"]
            except (KeyError, ValueError):
                pass
        vocabulary, candidate_item = Vocabulary.encode(candidates, codec)
        if key is not None:
            arrays = _vocabulary_arrays(vocabulary)
            if arrays is not None:
                cache.store("vocabulary", key, {**arrays, "candidate_item": candidate_item})
        return vocabulary, candidate_item

    def describe(self) -> dict[str, Any]:
        return {"source": "wordfreq", "language": self.language, **self._base_description()}


def party_bounds(n_users: int, parties: int) -> np.ndarray:
    """The first global user id of each of ``parties`` parties, then ``n_users``: party ``p`` holds
    ``[⌊p n / P⌋, ⌊(p + 1) n / P⌋)`` (the layout :mod:`fedhh.protocols.taps` reads its parties in)."""
    return (np.arange(parties + 1, dtype=np.int64) * n_users) // parties


class LanguagePartiesSource(WordfreqSource):
    """Users in parties, one wordfreq language each (``population.languages``).

    Party ``p`` holds the users of :func:`party_bounds` and draws its words
    from language ``p``'s frequencies; the candidates are the union of every
    language's ``vocabulary_size`` most frequent words (a word several
    languages share, such as "a" or "de", is one item).  A user's draws are
    keyed by (seed, user), as every sampled source's.
    """

    def __init__(
        self,
        n_users: int,
        languages: list[str],
        vocabulary_size: int,
        words_per_user: int,
        codec: ItemCodec,
        seed: int,
        before_encoding: BeforeEncoding | None = None,
        concentration: float = 0.0,
    ) -> None:
        import wordfreq

        unknown = [language for language in languages if language not in wordfreq.available_languages()]
        if unknown:
            raise InputError(
                f"population.languages: {unknown[0]!r} is not in wordfreq; "
                f"allowed: {sorted(wordfreq.available_languages())}"
            )
        lists = [wordfreq_candidates(language, vocabulary_size, codec.alphabet.name) for language in languages]
        union: dict[str, int] = {}
        for words, _ in lists:
            for word in words:
                union.setdefault(word, len(union))
        laws = np.zeros((len(languages), len(union)))
        for party, (words, frequencies) in enumerate(lists):
            laws[party, [union[word] for word in words]] = np.asarray(frequencies, dtype=np.float64)
        laws /= laws.sum(axis=1, keepdims=True)
        self.languages = list(languages)
        self.language = ",".join(languages)
        self._candidates_key = None
        SampledSource.__init__(
            self, list(union), laws.mean(axis=0), n_users, words_per_user, codec, seed, before_encoding, concentration
        )
        self._party_picks = [InverseCdf(np.cumsum(law) / np.sum(law)) for law in laws]

    def item_law(self) -> np.ndarray | None:
        """``None``: the parties' users draw from different laws (:meth:`range_laws` has each one)."""
        return None

    def range_laws(self, start: int, stop: int) -> list[tuple[int, int, np.ndarray]] | None:
        """The parties' ranges within ``[start, stop)``, each with its language's item law."""
        if self.words_per_user != 1:
            return None
        bounds = party_bounds(self.n_users, len(self.languages))
        return [
            (max(start, int(bounds[party])), min(stop, int(bounds[party + 1])), self._law_of(pick))
            for party, pick in enumerate(self._party_picks)
            if max(start, int(bounds[party])) < min(stop, int(bounds[party + 1]))
        ]

    def _draw_items(self, start: int, stop: int) -> list[np.ndarray]:
        """:meth:`SampledSource._draw_items` with each user's words drawn from its party's law."""
        users = np.arange(start, stop)
        party = np.searchsorted(party_bounds(self.n_users, len(self.languages)), users, side="right") - 1
        draws = UserRandom(derive_key(self.seed, POPULATION_PURPOSE), users)
        uniforms = [draws.random() for _ in range(self.words_per_user)]
        fresh = []
        for uniform in uniforms:
            picked = np.empty(users.size, dtype=np.int64)
            for index, pick in enumerate(self._party_picks):
                mine = party == index
                picked[mine] = pick(uniform[mine])
            fresh.append(self._candidate_item[np.minimum(picked, self._candidate_item.size - 1)])
        if self.concentration > 0 and self.words_per_user > 1:
            urn = UserRandom(derive_key(self.seed, URN_PURPOSE), users)
            return list(polya_urn_words(iter(fresh), self.words_per_user, urn, self.concentration))
        return fresh

    def describe(self) -> dict[str, Any]:
        return {"source": "wordfreq", "languages": self.languages, **self._base_description()}


CANDIDATES_FORMAT = 1  # of the cached candidates: raise it when the selection below changes
VOCABULARY_FORMAT = 1  # of a cached vocabulary: raise it when Vocabulary.encode or ItemCodec.encode change


def _vocabulary_arrays(vocabulary: Vocabulary) -> dict[str, np.ndarray] | None:
    """A vocabulary as the arrays of a cache entry (``None``: it cannot be stored)."""
    items = cache.texts_to_array(vocabulary.items)
    if items is None or vocabulary.key_order is None:
        return None
    report = vocabulary.encoding
    counts = [report.kept, report.dropped_overlong, report.truncated, report.dropped_unknown_chars]
    return {
        "items": items,
        "rows": vocabulary.rows,
        "key_order": vocabulary.key_order,
        "encoding": np.array(counts, dtype=np.int64),
    }


def _vocabulary_from_arrays(arrays: dict[str, np.ndarray], codec: ItemCodec) -> Vocabulary:
    """The vocabulary :func:`_vocabulary_arrays` stored (``ValueError`` if they do not fit together)."""
    rows, key_order = arrays["rows"], arrays["key_order"]
    items = cache.array_to_texts(arrays["items"], int(rows.shape[0]))
    if (
        rows.dtype != np.int64
        or rows.ndim != 2
        or rows.shape[1] != codec.max_rounds
        or key_order.shape != rows.shape[:1]
    ):
        raise ValueError("a cached vocabulary's arrays do not fit its codec")
    kept, overlong, truncated, unknown = (int(count) for count in arrays["encoding"].tolist())
    return Vocabulary(items, rows, codec, EncodingReport(kept, overlong, truncated, unknown), key_order=key_order)


@functools.lru_cache(maxsize=4)
def wordfreq_candidates(language: str, size: int, alphabet: str) -> tuple[list[str], np.ndarray]:
    """The ``size`` most frequent words of ``language`` made only of ``alphabet``'s characters,
    by decreasing frequency (equal frequencies alphabetically), with their frequencies.

    Kept in fedhh's cache folder (:mod:`fedhh.data.cache`) under wordfreq's
    version and these parameters: a later process reads them back without
    importing wordfreq or filtering its list.
    """
    key = _candidates_key(language, size, alphabet)
    cached = cache.load("wordfreq", key) if key is not None else None
    if cached is not None:
        try:
            words = cache.array_to_texts(cached["words"], int(cached["frequencies"].size))
        except (KeyError, ValueError):
            pass
        else:
            return words, cached["frequencies"]
    words, frequencies = _select_candidates(language, size, alphabet)
    encoded = cache.texts_to_array(words)
    if key is not None and encoded is not None:
        cache.store("wordfreq", key, {"words": encoded, "frequencies": frequencies})
    return words, frequencies


def _candidates_key(language: str, size: int, alphabet: str) -> dict[str, Any] | None:
    """Everything the candidates depend on (``None``: wordfreq's version unknown, not cached)."""
    version = _wordfreq_version()
    if version is None or alphabet not in ALPHABETS:
        return None
    return {
        "format": CANDIDATES_FORMAT,
        "wordfreq": version,
        "language": language,
        "size": size,
        "alphabet": alphabet,
        "characters": ALPHABETS[alphabet].characters.hex(),
    }


@functools.cache
def _wordfreq_version() -> str | None:
    """The installed wordfreq's version, read from its package metadata (without importing it)."""
    from importlib import metadata

    try:
        return metadata.version("wordfreq")
    except metadata.PackageNotFoundError:
        return None


def _select_candidates(language: str, size: int, alphabet: str) -> tuple[list[str], np.ndarray]:
    """:func:`wordfreq_candidates`, computed from wordfreq's list.

    wordfreq ships its list as frequency buckets, most frequent first, each
    word in one bucket; so the order comes from the bucket numbers and one
    sort of the words that make the cut, and the alphabet test runs on all
    code points as one array: no per-word numpy call and no sort of the
    whole list (321,180 English words).
    """
    import wordfreq

    if language not in wordfreq.available_languages():
        raise InputError(
            f"population.language: {language!r} is not in wordfreq; allowed: {sorted(wordfreq.available_languages())}"
        )
    buckets = wordfreq.get_frequency_list(language)
    listed = list(itertools.chain.from_iterable(buckets))
    bucket_of = np.repeat(np.arange(len(buckets)), [len(bucket) for bucket in buckets])
    allowed = ALPHABETS[alphabet]
    keep = (
        np.arange(len(listed))
        if allowed.byte_level
        else np.flatnonzero(_spelled_with(listed, allowed.index_table()[:128] > 0))
    )
    if keep.size > size:  # every bucket up to the one of the size-th word, for the ties in that bucket
        keep = keep[bucket_of[keep] <= bucket_of[keep[size - 1]]]
    words = np.array([listed[i] for i in keep.tolist()], dtype=str)
    order = np.lexsort((words, bucket_of[keep]))[:size]
    frequency_of_bucket = np.array([wordfreq.cB_to_freq(-index) for index in range(len(buckets))])
    return words[order].tolist(), frequency_of_bucket[bucket_of[keep[order]]]


def _spelled_with(words: list[str], ascii_allowed: np.ndarray) -> np.ndarray:
    """Which words are made only of the ASCII characters that ``ascii_allowed`` marks (vectorised
    over the code points of all words at once)."""
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    codes = np.frombuffer("".join(words).encode("utf-32-le"), dtype=np.uint32)
    allowed = np.append(ascii_allowed, False)  # entry 128: every code point beyond ASCII
    bad_before = np.concatenate(([0], np.cumsum(~allowed[np.minimum(codes, 128)], dtype=np.int64)))
    ends = np.cumsum(lengths)
    return bad_before[ends] == bad_before[ends - lengths]


class RandomStringSource(SampledSource):
    """Random strings of ``item_length`` characters (:func:`random_strings`) whose popularity by rank is
    a law of one parameter: a subclass names the law (``name``, its ``population.source``), its
    parameter (``parameter``, as :meth:`describe` names it, and ``key``, its ``[population]`` key) and
    the law's weights (``weights``)."""

    name: ClassVar[str]
    parameter: ClassVar[str]
    key: ClassVar[str]

    @staticmethod
    def weights(vocabulary_size: int, law_parameter: float) -> np.ndarray:
        """The law's popularity of ranks ``1..V``, unnormalised."""
        raise NotImplementedError

    def __init__(
        self,
        n_users: int,
        vocabulary_size: int,
        law_parameter: float,
        item_length: int,
        words_per_user: int,
        codec: ItemCodec,
        seed: int,
        before_encoding: BeforeEncoding | None = None,
        concentration: float = 0.0,
    ) -> None:
        self.law_parameter = law_parameter
        self.item_length = item_length
        strings = random_strings(vocabulary_size, item_length, codec, seed)
        weights = self.weights(vocabulary_size, law_parameter)
        super().__init__(strings, weights, n_users, words_per_user, codec, seed, before_encoding, concentration)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.name,
            self.parameter: self.law_parameter,
            "item_length": self.item_length,
            **self._base_description(),
        }


class ZipfSource(RandomStringSource):
    """Random strings with Zipf(s) popularity: ``P(rank r) ∝ r^-s``."""

    name = "zipf"
    parameter = "exponent"
    key = "zipf_exponent"

    @staticmethod
    def weights(vocabulary_size: int, law_parameter: float) -> np.ndarray:
        """``r^-s`` for ranks ``1..V``."""
        return np.arange(1, vocabulary_size + 1, dtype=np.float64) ** -law_parameter


class ExponentialSource(RandomStringSource):
    """Random strings with exponential popularity, [Wang19] §VI's synthetic dataset:
    ``P(rank r) ∝ e^(-λ (r - 1))``, the geometric law of ratio ``e^-λ`` (a geometric law of
    success probability ``g`` is ``λ = -ln(1 - g)``), cut at the vocabulary's size."""

    name = "exponential"
    parameter = "rate"
    key = "exponential_rate"

    @staticmethod
    def weights(vocabulary_size: int, law_parameter: float) -> np.ndarray:
        """``e^(-λ (r - 1))`` for ranks ``1..V`` (ranks past ``745 / λ`` weigh 0 in float64: they are
        never drawn)."""
        return np.exp(-law_parameter * np.arange(vocabulary_size, dtype=np.float64))


RANDOM_STRING_SOURCES: dict[str, type[RandomStringSource]] = {
    source.name: source for source in (ZipfSource, ExponentialSource)
}


def random_strings(count: int, length: int, codec: ItemCodec, seed: int) -> list[str]:
    """``count`` distinct random strings of ``length`` characters of the alphabet.

    Only characters that stand alone in the alphabet are used (printable
    ASCII for the byte alphabet), so every string decodes to itself.
    """
    alphabet = codec.alphabet.characters if not codec.alphabet.byte_level else ALPHABETS["ascii"].characters
    if len(alphabet) ** length < 2 * count:
        raise InputError(
            f"population.item_length: {length} characters of a {len(alphabet)}-letter alphabet "
            f"give too few distinct strings for population.vocabulary = {count}"
        )
    symbols = np.frombuffer(alphabet, dtype=np.uint8)
    generator = np.random.default_rng(int(derive_key(seed, ZIPF_STRINGS_PURPOSE)))
    found: dict[bytes, None] = {}
    while len(found) < count:
        batch = symbols[generator.integers(0, symbols.size, size=(count, length))]
        found.update(dict.fromkeys(row.tobytes() for row in batch))
    return [item.decode("ascii") for item in list(found)[:count]]


class FileSource(PopulationSource):
    """Users and items read from a file.

    * ``.txt``: one user per line, the line is the user's item;
    * ``.jsonl``: one user per line, the line a JSON string, the user's item;
    * ``.csv`` / ``.parquet``: columns ``user`` and ``item``, one row per
      occurrence (repeated rows become local counts).

    An item the codec refuses is reported at its first occurrence in the
    file (its line, or its Parquet row), not at its index among distinct items.
    """

    def __init__(self, path: str, codec: ItemCodec) -> None:
        self.path = path
        users, items = read_user_items(path)
        if not items:
            raise InputError(f"population.path: {path!r} has no items")
        user_index, self.n_users = factorize([str(user) for user in users])
        item_index, _ = factorize(items)
        distinct = list(dict.fromkeys(items))
        try:
            self.vocabulary, candidate_item = Vocabulary.encode(distinct, codec)
        except ItemError as error:
            if error.position is None:
                raise ItemError(f"population.path {path!r}: {error}") from None
            first = np.unique(item_index, return_index=True)[1]  # codes follow first appearance
            place = occurrence_place(path, int(first[error.position]))
            raise ItemError(f"population.path {path!r}: {place}: {error.reason}") from None
        self._all = Shard.from_pairs(self.vocabulary, 0, self.n_users, user_index, candidate_item[item_index])

    def build_users(self, start: int, stop: int) -> Shard:
        return self._all.slice(start, stop)

    def population_counts(self) -> PopulationCounts:
        return self._all.counts()  # the file is in memory already

    def describe(self) -> dict[str, Any]:
        return {"source": "file", "path": self.path, "users": self.n_users}

    def describe_data(self) -> dict[str, Any]:
        """The distinct items are the users' own: how many, and how many the codec dropped."""
        return {"vocabulary": self.vocabulary.size, "encoding": self.vocabulary.encoding.to_dict()}


def factorize(values: list[str]) -> tuple[np.ndarray, int]:
    """Codes ``0..k-1`` in order of first appearance, and ``k``."""
    distinct, first, inverse = np.unique(np.asarray(values, dtype=object), return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()], int(distinct.size)


TEXT_SUFFIXES = (".txt", ".text", "")
JSON_LINES_SUFFIXES = (".jsonl",)
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def read_user_items(path: str) -> tuple[list[Any], list[str]]:
    """(user, item) occurrences from a text, JSON Lines, CSV or Parquet file.

    Every refusal names the file's own line (text, CSV: header counted) or
    row (Parquet, 1-based).
    """
    file = Path(path)
    if not file.is_file():
        raise InputError(f"population.path: {path!r} is not a file")
    suffix = file.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        lines = read_lines(file, path)
        return list(range(len(lines))), lines
    if suffix in JSON_LINES_SUFFIXES:
        items = read_json_lines(file, path)
        return list(range(len(items))), items
    if suffix in TABLE_SUFFIXES:
        return read_table(file, path, suffix)
    raise InputError(f"population.path: unsupported file type {suffix!r}; allowed: .txt, .jsonl, .csv, .parquet")


def read_lines(file: Path, path: str) -> list[str]:
    """The lines of a UTF-8 text file, split on ``\\n`` (and ``\\r\\n``) only.

    ``str.splitlines`` also splits on U+2028, U+2029, ``\\x0b``, ``\\x0c``,
    ``\\x1c``-``\\x1e`` and ``\\x85``, which would turn one user's line into
    several users, each voting: those characters stay inside the item (where
    the alphabet accepts or refuses them like any other).  A leading BOM is
    dropped; a final newline ends the last line, it does not start a user.
    """
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        line = raw[:start].count(b"\n") + 1
        line_start = raw.rfind(b"\n", 0, start) + 1
        column = len(raw[line_start:start].decode("utf-8-sig", errors="replace")) + 1
        raise ItemError(
            f"population.path {path!r}: line {line} is not valid UTF-8 (column {column}, "
            f"byte {start - line_start + 1} of the line)"
        ) from None
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    if "" in lines:
        raise ItemError(f"population.path {path!r}: line {lines.index('') + 1} is empty (one item per line)")
    return lines


def read_json_lines(file: Path, path: str) -> list[str]:
    """The items of a JSON Lines file: one user a line, the line a JSON string (the user's item).

    JSON quoting lets an item hold any character, a newline included; the
    lines are parsed as one JSON array (no Python loop per user), and only
    a file that does not parse is scanned line by line, to name its first
    bad line.
    """
    lines = read_lines(file, path)
    try:
        items = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        items = None
    if items is None or len(items) != len(lines) or not all(type(item) is str and item for item in items):
        for number, line in enumerate(lines, start=1):
            try:
                item = json.loads(line)
            except ValueError:
                item = None
            if type(item) is not str or not item:
                shown = line if len(line) <= 40 else line[:40] + "..."
                raise ItemError(
                    f"population.path {path!r}: line {number} ({shown!r}) is not a non-empty JSON string (a "
                    '.jsonl population holds one user a line, the user\'s item as a JSON string: "word")'
                )
    return items


def read_table(file: Path, path: str, suffix: str) -> tuple[list[Any], list[str]]:
    """The ``user`` and ``item`` columns of a CSV or Parquet file, without nulls or empty items.

    CSV cells are read as text (``007`` stays ``007``, an item ``12345`` is a
    string), so nothing is coerced; a Parquet ``user`` column keeps its type.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv
    import pyarrow.parquet

    try:
        if suffix == ".csv":
            table = pyarrow.csv.read_csv(
                file,
                read_options=pyarrow.csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
                convert_options=pyarrow.csv.ConvertOptions(column_types={"user": pa.string(), "item": pa.string()}),
            )
        else:
            check_columns(path, pyarrow.parquet.read_schema(file).names, "the schema")
            table = pyarrow.parquet.read_table(file)
    except InputError:
        raise
    except Exception as error:  # pyarrow raises many types for malformed files
        raise unreadable(file, path, error) from None
    header = f"the header (line {csv_line(file, -1)})" if suffix == ".csv" else "the schema"
    check_columns(path, table.column_names, header)
    user, item = table.column("user"), table.column("item")
    check_text(file, path, user, item)
    check_users_present(path, user)
    if _is_text(item):
        bad_item = _first_row(pc.is_null(item), pc.equal(item, ""))
    else:
        bad_item = 0 if len(item) else None  # numbers or bytes are not text items
    if bad_item is not None:
        raise ItemError(f"population.path {path!r}: {occurrence_place(path, bad_item)} has an empty or non-text item")
    return user.to_pylist(), item.to_pylist()


def check_text(file: Path, path: str, user: Any, item: Any, first_row: int = 0) -> None:
    """Refuse text a CSV or Parquet file holds but cannot mean (pyarrow columns whose row 0 is row
    ``first_row`` of the file): a Parquet text column with bytes that are not UTF-8, a CSV quoted
    field left open to the end of the file (:mod:`fedhh.data.table_errors`)."""
    if file.suffix.lower() == ".csv":
        check_csv_rows(file, path, [user, item])
        return
    for name, column in (("user", user), ("item", item)):
        if _is_text(column):
            check_utf8(path, column, name, first_row)


def check_users_present(path: str, user: Any, first_row: int = 0) -> None:
    """Refuse the first row of a ``user`` column (a pyarrow array whose row 0 is row ``first_row``
    of the file) that names no user: null, empty text or NaN, with its place in the file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = _first_row(
        pc.is_null(user),
        pc.equal(user, "") if _is_text(user) else None,
        pc.is_nan(user) if pa.types.is_floating(user.type) else None,
    )
    if missing is not None:
        value = user[missing].as_py()
        problem = "has no user" if value is None or value == "" else f"has user {value!r}"
        raise InputError(
            f"population.path {path!r}: {occurrence_place(path, first_row + missing)} {problem}; every row needs "
            "the user who holds its item (rows of unknown users cannot be told apart)"
        )


def _is_text(column: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)


def _first_row(*masks: Any) -> int | None:
    """The first row where any of the pyarrow boolean masks holds (``None`` masks are skipped)."""
    import pyarrow.compute as pc

    rows = []
    for mask in masks:
        if mask is not None:
            found = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
            if found.size:
                rows.append(int(found[0]))
    return min(rows, default=None)


def occurrence_place(path: str, index: int) -> str:
    """Where occurrence ``index`` (0-based, as :func:`read_user_items` lists them) is in the file."""
    suffix = Path(path).suffix.lower()
    if suffix in TEXT_SUFFIXES or suffix in JSON_LINES_SUFFIXES:
        return f"line {index + 1}"
    if suffix == ".csv":
        return f"line {csv_line(Path(path), index)}"
    return f"row {index + 1}"


def csv_line(file: Path, row: int) -> int:
    """The file line where data row ``row`` (0-based, blank lines skipped as pyarrow
    skips them) starts; the header is line 1 when nothing precedes it.  Only
    called to report an error, so a Python scan is fine."""
    with open(file, newline="", encoding="utf-8", errors="replace") as handle:
        reader = csv.reader(handle)
        index = -1  # the header
        while True:
            start = reader.line_num + 1
            fields = next(reader, None)
            if fields is None:
                return start
            if not fields:
                continue
            if index == row:
                return start
            index += 1


SAMPLED_SOURCES = ("wordfreq", "zipf", "exponential")  # populations drawn from the config alone
SOURCES = (*SAMPLED_SOURCES, "file", "dataset")


def configured_users(population: dict[str, Any]) -> int | None:
    """``n`` where the config gives it (a sampled population: its ``users`` key); ``None`` for a
    file or a dataset, whose size only reading it tells."""
    return int(population["users"]) if population["source"] in SAMPLED_SOURCES else None


def sampled_candidates(population: dict[str, Any], codec: ItemCodec, seed: int) -> list[str] | None:
    """The candidates a sampled population (wordfreq, zipf, exponential) draws its users' items
    from, as its source reads them, without encoding them; ``None`` for a file or a dataset."""
    if population["source"] == "wordfreq" and population.get("languages"):
        words = (
            wordfreq_candidates(language, population["vocabulary"], codec.alphabet.name)[0]
            for language in party_languages(population["languages"])
        )
        return list(dict.fromkeys(itertools.chain.from_iterable(words)))
    if population["source"] == "wordfreq":
        return wordfreq_candidates(population["language"], population["vocabulary"], codec.alphabet.name)[0]
    if population["source"] in ("zipf", "exponential"):
        return random_strings(population["vocabulary"], population["item_length"], codec, seed)
    return None


def sampled_law(population: dict[str, Any], codec: ItemCodec) -> np.ndarray:
    """The law over its candidates a sampled population's users draw from, normalised."""
    source = population["source"]
    if source == "wordfreq" and population.get("languages"):
        languages = party_languages(population["languages"])
        lists = [wordfreq_candidates(language, population["vocabulary"], codec.alphabet.name) for language in languages]
        union = list(dict.fromkeys(itertools.chain.from_iterable(words for words, _ in lists)))
        place = {word: index for index, word in enumerate(union)}
        weights = np.zeros(len(union))
        for words, frequencies in lists:  # the parties' laws, mixed in equal shares
            weights[[place[word] for word in words]] += np.asarray(frequencies) / float(np.sum(frequencies))
    elif source == "wordfreq":
        weights = wordfreq_candidates(population["language"], population["vocabulary"], codec.alphabet.name)[1]
    elif source in RANDOM_STRING_SOURCES:
        law = RANDOM_STRING_SOURCES[source]
        weights = law.weights(population["vocabulary"], population[law.key])
    else:
        raise ValueError(f"population.source {source!r} is not a sampled source")
    return np.asarray(weights, dtype=np.float64) / float(np.sum(weights))


def held_items_per_user(population: dict[str, Any], codec: ItemCodec) -> float:
    """The items a user of a sampled population holds in memory, for its memory check
    (:func:`fedhh.resources.require_population_memory`): one when each keeps one
    (``per_user = "mode"``, or one word each), ``words_per_user`` for independent draws
    (as many distinct items, but for the rare repeat), and for users with a Dirichlet law of
    their own the expected number of distinct items they draw
    (:func:`fedhh.data.user_words.expected_distinct_items`), fewer the more they repeat."""
    words = int(population["words_per_user"])
    if population["per_user"] == "mode" or words == 1:
        return 1
    concentration = float(population["concentration"])
    if concentration == 0:
        return words
    return expected_distinct_items(sampled_law(population, codec), words, concentration)


def make_source(
    population: dict[str, Any],
    codec: ItemCodec,
    seed: int,
    before_encoding: BeforeEncoding | None = None,
    deny_list: DenyList | None = None,
) -> PopulationSource:
    """The population a config's ``[population]`` section describes, without the items of
    ``deny_list`` (``run.deny_list``: :mod:`fedhh.data.deny_list`), which are removed before
    ``population.per_user`` keeps a user's most frequent item.

    ``before_encoding(n_users)`` runs before the vocabulary is encoded where the config gives the
    population size (the sampled sources); a file's or a dataset's size is known only once read.
    """
    users = _users_source(population, codec, seed, before_encoding)
    if deny_list is not None:
        users = DeniedItemsSource(users, deny_list)
    return keep_per_user(users, population["per_user"], seed)


def _users_source(
    population: dict[str, Any], codec: ItemCodec, seed: int, before_encoding: BeforeEncoding | None
) -> PopulationSource:
    """The population's users with all their items (before ``population.per_user``)."""
    source = population["source"]
    concentration = float(population["concentration"])
    if source == "wordfreq" and population.get("languages"):
        return LanguagePartiesSource(
            population["users"],
            party_languages(population["languages"]),
            population["vocabulary"],
            population["words_per_user"],
            codec,
            seed,
            before_encoding,
            concentration,
        )
    if source == "wordfreq":
        return WordfreqSource(
            population["users"],
            population["language"],
            population["vocabulary"],
            population["words_per_user"],
            codec,
            seed,
            before_encoding,
            concentration,
        )
    if source in RANDOM_STRING_SOURCES:
        random_source = RANDOM_STRING_SOURCES[source]
        return random_source(
            population["users"],
            population["vocabulary"],
            population[random_source.key],
            population["item_length"],
            population["words_per_user"],
            codec,
            seed,
            before_encoding,
            concentration,
        )
    if source == "file":
        path = Path(population["path"])
        stamp = path.stat().st_mtime_ns if path.is_file() else -1
        return _cached_file_source(str(path), stamp, codec)
    if source == "dataset":
        manifest = Path(population["path"]) / MANIFEST
        stamp = manifest.stat().st_mtime_ns if manifest.is_file() else -1
        return cached_dataset_source(str(population["path"]), stamp, codec)
    raise InputError(f"population.source: got {source!r}; allowed: {list(SOURCES)}")


@functools.lru_cache(maxsize=2)
def _cached_file_source(path: str, modified_ns: int, codec: ItemCodec) -> FileSource:
    """One read per process and file version (shards of one run share it)."""
    return FileSource(path, codec)
