"""The compiled local-hashing decodes (:mod:`fedhh.oracles.compiled_hashing`) count exactly what
the numpy path counts: on random inputs of every awkward size, through the oracles, in whole
runs of the protocols that use them, and from a cache a second process loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fedhh.config import load_config
from fedhh.errors import InputError
from fedhh.experiment import Experiment
from fedhh.oracles.compiled_hashing import REPORT_BLOCK
from fedhh.oracles.fast_local_hashing import FastLocalHashing, FastLocalHashStatistics
from fedhh.oracles.numba_setting import NUMBA_VARIABLE
from fedhh.oracles.hashing import MAX_RANGE, compiled_kernels, count_supports, local_hash, local_hash_parameters
from simulations.fast import run_fast

from .helpers import run_view

MAX_WORD = np.iinfo(np.uint64).max


def random_reports(generator: np.random.Generator, n_reports: int, n_candidates: int, g: int):  # noqa: ANN201
    """Seeds, buckets and candidate keys over the whole 64-bit range, the extreme words included."""
    seeds = generator.integers(0, MAX_WORD, n_reports, dtype=np.uint64, endpoint=True)
    keys = generator.integers(0, MAX_WORD, n_candidates, dtype=np.uint64, endpoint=True)
    extremes = np.array([0, 1, MAX_WORD], dtype=np.uint64)
    seeds[: min(3, n_reports)] = extremes[: min(3, n_reports)]
    keys[: min(3, n_candidates)] = extremes[: min(3, n_candidates)]
    buckets = generator.integers(0, g, n_reports, dtype=np.int64)
    return seeds, buckets, keys


def both_paths(monkeypatch: pytest.MonkeyPatch, decode):  # noqa: ANN001, ANN201
    """``decode()`` with every decode compiled, then with numpy only."""
    monkeypatch.setenv(NUMBA_VARIABLE, "1")
    compiled = decode()
    monkeypatch.setenv(NUMBA_VARIABLE, "0")
    return compiled, decode()


# sizes: none, one, the four-candidate tiles' remainders, a report block and one more or less,
# several blocks not a multiple of it; the threaded split (>= 2**24 pairs) in the last two
SIZES = [
    (0, 0), (0, 5), (5, 0), (1, 1), (1, 7), (7, 1), (3, 2), (2, 3), (13, 4), (6, 5), (9, 6), (11, 7),
    (REPORT_BLOCK - 1, 9), (REPORT_BLOCK, 10), (REPORT_BLOCK + 1, 11), (3 * REPORT_BLOCK + 17, 2047),
    (1001, 2048), (999, 2049), (5_003, 8_193), (300_007, 61),
]
RANGES = [2, 3, 7, 56, 1 << 16, 1_000_003, MAX_RANGE - 1, MAX_RANGE]


@pytest.mark.parametrize(("n_reports", "n_candidates"), SIZES)
def test_compiled_supports_equal_the_numpy_path(monkeypatch: pytest.MonkeyPatch, n_reports: int, n_candidates: int) -> None:
    generator = np.random.default_rng(n_reports * 7919 + n_candidates)
    for g in RANGES:
        seeds, buckets, keys = random_reports(generator, n_reports, n_candidates, g)
        compiled, numpy_counts = both_paths(monkeypatch, lambda: count_supports(seeds, buckets, g, keys))
        assert compiled.dtype == numpy_counts.dtype == np.int64
        np.testing.assert_array_equal(compiled, numpy_counts, err_msg=f"g = {g}")


@pytest.mark.parametrize("g", [2, 56, MAX_RANGE])
def test_compiled_supports_are_the_brute_force_counts(monkeypatch: pytest.MonkeyPatch, g: int) -> None:
    """Against the definition, reports hashed one by one: each report supports a candidate
    it was made from, so the counts are far from zero and a lost or doubled block, tile or
    lane shows."""
    generator = np.random.default_rng(g)
    seeds, _, keys = random_reports(generator, 3 * REPORT_BLOCK + 5, 23, g)
    buckets = local_hash(seeds, keys[generator.integers(0, keys.size, seeds.size)], g)
    brute = (local_hash(seeds[:, None], keys[None, :], g) == buckets[:, None]).sum(axis=0)
    assert brute.sum() >= seeds.size
    monkeypatch.setenv(NUMBA_VARIABLE, "1")
    np.testing.assert_array_equal(count_supports(seeds, buckets, g, keys), brute)


MASK = (1 << 64) - 1
GOLDEN, MUL1, MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # SplitMix64's constants


def undo_xorshift(value: int, shift: int) -> int:
    result = value
    for multiple in range(shift, 64, shift):
        result ^= value >> multiple
    return result


def key_with_hash_word(seed: int, word: int) -> int:
    """A raw key whose 32-bit hash word ``z = a * key32 + b (mod 2**32)`` under ``seed``'s
    function is ``word``: solve for the 32-bit key, then invert SplitMix64's mixing."""
    multipliers, offsets = local_hash_parameters(np.array([seed], dtype=np.uint64))
    a, b = int(multipliers[0]), int(offsets[0])
    key32 = (word - b) * pow(a, -1, 1 << 32) % (1 << 32)
    mixed = undo_xorshift(key32 << 32, 31) * pow(MUL2, -1, 1 << 64) & MASK
    mixed = undo_xorshift(mixed, 27) * pow(MUL1, -1, 1 << 64) & MASK
    return (undo_xorshift(mixed, 30) - GOLDEN) & MASK


@pytest.mark.parametrize("g", [2, 3, 56, 1_000_003, MAX_RANGE])
def test_supports_at_the_edges_of_each_bucket(monkeypatch: pytest.MonkeyPatch, g: int) -> None:
    """Candidates whose hash word is the first or last of a report's bucket are supported, and
    those one word outside it are not: the kernel's single comparison against the bucket's
    width agrees with the bucket ``(z g) >> 32`` of the definition at every edge (random keys
    reach an edge with probability about 2**-31)."""
    generator = np.random.default_rng(g + 1)
    seeds = generator.integers(0, MAX_WORD, 40, dtype=np.uint64, endpoint=True)
    buckets = generator.integers(0, g, seeds.size)
    starts = [-(-(int(y) << 32) // g) for y in buckets]  # first word of each bucket
    stops = [-(-((int(y) + 1) << 32) // g) for y in buckets]  # first word after it
    words = [(word + shift) % (1 << 32) for start, stop in zip(starts, stops) for word, shift in
             ((start, -1), (start, 0), (stop, -1), (stop, 0))]
    keys = np.array([key_with_hash_word(int(seeds[i // 4]), word) for i, word in enumerate(words)], dtype=np.uint64)
    own = local_hash(seeds[np.arange(keys.size) // 4], keys, g).reshape(-1, 4)
    np.testing.assert_array_equal(own[:, 1:3], np.repeat(buckets[:, None], 2, axis=1))  # inside: the edges hit
    assert np.all(own[:, [0, 3]] != buckets[:, None])  # a word outside
    brute = (local_hash(seeds[:, None], keys[None, :], g) == buckets[:, None]).sum(axis=0)
    for setting in ("1", "0"):
        monkeypatch.setenv(NUMBA_VARIABLE, setting)
        for first in range(4):  # the last report's edges among the candidates left over by 4-candidate tiles
            np.testing.assert_array_equal(count_supports(seeds, buckets, g, keys[first:]), brute[first:])


@pytest.mark.parametrize(("hash_functions", "g"), [(1, 2), (3, 7), (1000, 56), (257, 64), (3, (1 << 21) + 1), (2, 1 << 21)])
@pytest.mark.parametrize("n_candidates", [0, 1, 5, 2_047, 2_049])
def test_compiled_flh_supports_equal_the_numpy_path(
    monkeypatch: pytest.MonkeyPatch, hash_functions: int, g: int, n_candidates: int
) -> None:
    """FLH's table sums, powers of two (one-shift buckets in numpy) and other ranges alike."""
    generator = np.random.default_rng(hash_functions + g + n_candidates)
    oracle = FastLocalHashing(4.0, 1 << 64, hash_functions=hash_functions, seed=11, g=g)
    table = generator.integers(0, 1 << 40, (hash_functions, g), dtype=np.int64)
    statistics = FastLocalHashStatistics(table, 1 << 40)
    _, _, candidates = random_reports(generator, 0, n_candidates, g)
    compiled, numpy_support = both_paths(monkeypatch, lambda: oracle.support(statistics, candidates))
    assert compiled.counts.dtype == numpy_support.counts.dtype
    np.testing.assert_array_equal(compiled.counts, numpy_support.counts)
    np.testing.assert_array_equal(compiled.n_users, numpy_support.n_users)


def test_the_compared_decodes_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba is a dependency: with ``FEDHH_NUMBA=1`` the compiled decodes load, so the comparisons
    here compare two paths, not numpy with itself."""
    monkeypatch.setenv(NUMBA_VARIABLE, "1")
    assert compiled_kernels(1, 1 << 20) is not None
    monkeypatch.setenv(NUMBA_VARIABLE, "0")
    assert compiled_kernels(1 << 30, 1) is None


def test_a_setting_other_than_auto_1_or_0_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NUMBA_VARIABLE, "yes")
    with pytest.raises(InputError, match="FEDHH_NUMBA must be one of auto, 1, 0"):
        count_supports(np.zeros(1, dtype=np.uint64), np.zeros(1), 2, np.zeros(1, dtype=np.uint64))


PEM_RUN = [
    'protocol.name="pem"', 'population.source="zipf"', "population.users=20000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.3", "protocol.max_length=4", "privacy.epsilon=4.0",
    "protocol.start_length=4", "protocol.segment_length=8", "run.seed=5", "run.top_k=10",
]
OTHER_RUNS = [
    'protocol.name="{}"', 'population.source="zipf"', "population.users=30000", "population.vocabulary=2000",
    "population.item_length=4", "population.zipf_exponent=1.5", "protocol.max_length=4", "privacy.epsilon=8.0",
    "run.seed=9", "run.top_k=5", "protocol.top_k=8",
]
RUNS = {
    "pem-olh": [*PEM_RUN, 'protocol.oracle="olh"'],
    "pem-blh": [*PEM_RUN, 'protocol.oracle="blh"'],
    "pem-flh": [*PEM_RUN, 'protocol.oracle="flh"'],
    "spm": [OTHER_RUNS[0].format("spm"), *OTHER_RUNS[1:], "protocol.segment_bits=7"],
    "mcm": [OTHER_RUNS[0].format("mcm"), *OTHER_RUNS[1:]],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_with_compiled_decodes_is_the_numpy_run(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The same discoveries, estimates and round trace for one seed (3 shards, so several
    responses are added before each decode)."""
    experiment = Experiment(load_config(None, RUNS[name]))

    def run() -> tuple[list, list]:  # noqa: ANN202
        result = run_fast(experiment, 3, "inprocess").result
        return run_view(result), [record.to_dict() for record in result.trace]

    compiled, numpy_run = both_paths(monkeypatch, run)
    assert compiled[0], "the run found something"
    assert compiled == numpy_run


CACHED_DECODE = textwrap.dedent(
    """
    import json
    import numpy as np
    from fedhh.oracles import compiled_hashing

    words = np.arange(1, 100, dtype=np.uint32)
    counts = compiled_hashing.count_local_hash_supports(words, words, words, words[:9])
    stats = compiled_hashing.count_local_hash_supports.stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                      "counts": counts.tolist()}))
    """
)


def test_the_compiled_code_is_cached_for_the_next_process(tmp_path: Path) -> None:
    """The first process compiles the kernel and stores it in ``NUMBA_CACHE_DIR``; the next one
    loads it from there instead of compiling it again."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def decode() -> dict:
        finished = subprocess.run([sys.executable, "-c", CACHED_DECODE], env=environment, capture_output=True,
                                  text=True, check=True, timeout=300)
        return json.loads(finished.stdout)

    first, second = decode(), decode()
    assert (first["hits"], first["misses"]) == (0, 1)
    assert any((tmp_path / "numba").rglob("*.nbi")), "an index of the cached code was written"
    assert (second["hits"], second["misses"]) == (1, 0)
    assert first["counts"] == second["counts"]


def test_without_a_writable_cache_folder_the_code_is_compiled_in_the_process(tmp_path: Path) -> None:
    """fedhh's source folder and the user's home read-only (a private mount namespace; root
    writes anywhere else) and no ``NUMBA_CACHE_DIR``: numba finds nowhere to cache and the
    kernels are compiled for the process alone, with the same counts."""
    home = tmp_path / "home"
    home.mkdir()
    source = Path(compiled_hashing_file()).parents[2]
    script = tmp_path / "decode.py"
    script.write_text(CACHED_DECODE + "print(type(compiled_hashing.count_local_hash_supports._cache).__name__)\n")
    read_only = (f"mount --bind {source} {source} && mount -o remount,bind,ro {source} && "
                 f"mount --bind {home} {home} && mount -o remount,bind,ro {home} && exec \"$0\" \"$@\"")
    environment = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    environment.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", read_only, "true"], capture_output=True, env=environment)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here ({probe.stderr.decode().strip()[:200]})")
    finished = subprocess.run(["unshare", "--mount", "sh", "-c", read_only, sys.executable, str(script)],
                              capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    decoded, cache = finished.stdout.splitlines()
    assert cache == "NullCache"
    assert json.loads(decoded)["counts"] == json.loads(subprocess.run(
        [sys.executable, "-c", CACHED_DECODE], capture_output=True, text=True, check=True, timeout=300).stdout)["counts"]


def compiled_hashing_file() -> str:
    import fedhh.oracles.compiled_hashing

    return fedhh.oracles.compiled_hashing.__file__
