"""fedhh's cache folder: wordfreq's candidates read back bit for bit without importing wordfreq,
and never a file fedhh did not create overwritten, nor a damaged or foreign entry trusted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedhh.data import cache
from fedhh.data.sources import _candidates_key, _select_candidates, wordfreq_candidates

PARAMETERS = ("en", 2_000, "lowercase")

# A fresh process: the candidates, whether wordfreq was imported, digests of both lists.
READ_BACK = """
import hashlib, json, sys
from fedhh.data.sources import wordfreq_candidates
words, frequencies = wordfreq_candidates("en", 2000, "lowercase")
print(json.dumps({"wordfreq_imported": "wordfreq" in sys.modules,
                  "words": hashlib.sha256("\\n".join(words).encode()).hexdigest(),
                  "frequencies": hashlib.sha256(frequencies.tobytes()).hexdigest(),
                  "dtype": str(frequencies.dtype)}))
"""


@pytest.fixture
def cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(folder))
    wordfreq_candidates.cache_clear()
    yield folder
    wordfreq_candidates.cache_clear()


def entry_file() -> Path:
    key = _candidates_key(*PARAMETERS)
    assert key is not None, "wordfreq is installed: its version keys the entry"
    path = cache.entry_path("wordfreq", key)
    assert path is not None
    return path


def test_a_later_process_reads_the_candidates_back_without_wordfreq(cache_folder: Path) -> None:
    words, frequencies = wordfreq_candidates(*PARAMETERS)
    expected_words, expected_frequencies = _select_candidates(*PARAMETERS)
    assert words == expected_words and len(words) == 2_000
    np.testing.assert_array_equal(frequencies, expected_frequencies)
    assert [path.name for path in cache_folder.iterdir()] == [entry_file().name]  # no temporary file left
    child = subprocess.run([sys.executable, "-c", READ_BACK], capture_output=True, text=True, check=True,
                           env={**os.environ, cache.CACHE_VARIABLE: str(cache_folder)})
    read_back = json.loads(child.stdout)
    assert read_back == {
        "wordfreq_imported": False,
        "words": hashlib.sha256("\n".join(expected_words).encode()).hexdigest(),
        "frequencies": hashlib.sha256(expected_frequencies.tobytes()).hexdigest(),
        "dtype": "float64",
    }


def test_the_key_holds_the_version_and_every_parameter() -> None:
    key = _candidates_key(*PARAMETERS)
    assert key is not None and key["wordfreq"] and key["characters"] == b"abcdefghijklmnopqrstuvwxyz".hex()
    names = {cache.entry_path("wordfreq", k) for k in
             (key, {**key, "size": 2_001}, {**key, "language": "fr"}, {**key, "alphabet": "ascii"},
              {**key, "wordfreq": key["wordfreq"] + ".post1"}, {**key, "format": key["format"] + 1})}
    assert len(names) == 6


def test_a_file_fedhh_did_not_write_is_neither_trusted_nor_overwritten(cache_folder: Path) -> None:
    path = entry_file()
    path.parent.mkdir(parents=True)
    other_key = {**_candidates_key(*PARAMETERS), "size": 3}
    foreign = [b"not an entry", b""]
    with open(path, "wb") as handle:  # a valid entry, but of another key
        np.savez(handle, key=np.frombuffer(json.dumps(other_key).encode(), dtype=np.uint8),
                 words=cache.texts_to_array(["a", "b", "c"]), frequencies=np.ones(3))
    foreign.append(path.read_bytes())
    with open(path, "wb") as handle:  # a bare array
        np.save(handle, np.arange(3))
    foreign.append(path.read_bytes())
    expected_words, expected_frequencies = _select_candidates(*PARAMETERS)
    for content in foreign:
        path.write_bytes(content)
        wordfreq_candidates.cache_clear()
        words, frequencies = wordfreq_candidates(*PARAMETERS)
        assert words == expected_words
        np.testing.assert_array_equal(frequencies, expected_frequencies)
        assert path.read_bytes() == content, "the file at the entry's name is left as it was"
        assert sorted(cache_folder.iterdir()) == [path]


def test_a_fifo_at_the_entry_does_not_block(cache_folder: Path) -> None:
    path = entry_file()
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    words, _ = wordfreq_candidates(*PARAMETERS)
    assert len(words) == 2_000 and path.is_fifo()


def test_no_cache_when_turned_off_or_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected_words, _ = _select_candidates(*PARAMETERS)
    monkeypatch.setenv(cache.CACHE_VARIABLE, "")
    assert cache.cache_folder() is None and cache.entry_path("wordfreq", {"any": "key"}) is None
    wordfreq_candidates.cache_clear()
    assert wordfreq_candidates(*PARAMETERS)[0] == expected_words
    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(blocker / "cache"))  # its parent is a file
    wordfreq_candidates.cache_clear()
    assert wordfreq_candidates(*PARAMETERS)[0] == expected_words
    assert blocker.read_text() == "mine"
    wordfreq_candidates.cache_clear()


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cache.CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_folder() == tmp_path / "fedhh"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_folder() == Path.home() / ".cache" / "fedhh"


def test_texts_round_trip_and_a_separator_is_refused() -> None:
    texts = ["", "naïve", "日本", "a b"]
    assert cache.array_to_texts(cache.texts_to_array(texts), len(texts)) == texts
    assert cache.array_to_texts(cache.texts_to_array([]), 0) == []
    assert cache.texts_to_array(["a\x00b"]) is None
    with pytest.raises(ValueError, match="list of 3 texts holds 2"):
        cache.array_to_texts(cache.texts_to_array(["a", "b"]), 3)


def test_a_wordfreq_vocabulary_is_read_back_as_it_was_encoded(cache_folder: Path) -> None:
    from fedhh.data.items import ItemCodec, get_alphabet
    from fedhh.data.sources import WordfreqSource

    codec = ItemCodec(get_alphabet("lowercase"), 2, 6, overlong="truncate")  # merged rows: items are decoded
    encoded = WordfreqSource(5_000, "en", 2_000, 1, codec, 0)
    wordfreq_candidates.cache_clear()
    read_back = WordfreqSource(5_000, "en", 2_000, 1, codec, 0)
    assert sorted(path.name.partition("-")[0] for path in cache_folder.iterdir()) == ["vocabulary", "wordfreq"]
    first, second = encoded.vocabulary, read_back.vocabulary
    assert first.items == second.items and first.encoding == second.encoding and first.encoding.truncated > 0
    for array in ("rows", "key_order"):
        np.testing.assert_array_equal(getattr(first, array), getattr(second, array))
        assert getattr(second, array).dtype == np.int64
    np.testing.assert_array_equal(encoded.build_users(0, 5_000).item_of_user, read_back.build_users(0, 5_000).item_of_user)
    for depth in range(1, codec.max_rounds + 1):
        for a, b in zip(first.prefixes.at(depth), second.prefixes.at(depth)):
            np.testing.assert_array_equal(a, b)


def test_a_later_source_takes_its_vocabulary_from_the_entry(cache_folder: Path) -> None:
    """The entry is what a later source reads (here an entry fedhh wrote, then rewritten through
    the cache with marked items, so that reading it shows)."""
    from fedhh.data.items import ItemCodec, get_alphabet
    from fedhh.data.sources import WordfreqSource

    codec = ItemCodec(get_alphabet("lowercase"), 1, 10)
    encoded = WordfreqSource(100, "en", 2_000, 1, codec, 0)
    (entry,) = cache_folder.glob("vocabulary-*.npz")
    with np.load(entry) as stored:
        arrays = {name: stored[name] for name in stored.files if name != "key"}
        key = json.loads(stored["key"].tobytes())
    entry.unlink()
    marked = [item.upper() for item in encoded.vocabulary.items]
    assert cache.store("vocabulary", key, {**arrays, "items": cache.texts_to_array(marked)}) == entry
    wordfreq_candidates.cache_clear()
    assert WordfreqSource(100, "en", 2_000, 1, codec, 0).vocabulary.items == marked
