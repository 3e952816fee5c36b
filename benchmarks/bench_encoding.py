"""Encoding a vocabulary into symbol rows: peak memory and time, against what the memory check counts.

    python benchmarks/bench_encoding.py [--repeats 5]

For wordfreq's English words under the lowercase alphabet, at a few unit
sizes and maximum lengths: the bytes of the rows, what ``ItemCodec.encoding_bytes``
counts (the memory check's figure), the peak tracemalloc sees while
``Vocabulary.encode`` runs (numpy's arrays included), and the median time.
Run it against another checkout with ``PYTHONPATH=<checkout>`` to compare
(a checkout without ``encoding_bytes`` prints no count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc

CASES = ((100_000, 1, 10), (100_000, 1, 64), (100_000, 2, 64), (1_000, 1, 10_000))  # (words, unit, max_length)
MIB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed encodings per case (default 5)")
    args = parser.parse_args()
    os.environ.setdefault("FEDHH_CACHE_DIR", tempfile.mkdtemp())  # never the user's cache
    from fedhh.data.items import ItemCodec, get_alphabet
    from fedhh.data.population import Vocabulary
    from fedhh.data.sources import wordfreq_candidates

    words = wordfreq_candidates("en", max(case[0] for case in CASES), "lowercase")[0]
    print("| words | unit | max_length | rows MiB | counted MiB | peak MiB | median ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for count, unit, max_length in CASES:
        codec = ItemCodec(get_alphabet("lowercase"), unit, max_length)
        items = words[:count]
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            Vocabulary.encode(items, codec)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        vocabulary, _ = Vocabulary.encode(items, codec)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        counted = "-"
        if hasattr(codec, "encoding_bytes"):
            kept = [len(item) for item in items if len(item) <= max_length]
            counted = f"{codec.encoding_bytes(len(kept), max(kept), sum(map(len, items))) / MIB:.1f}"
        print(f"| {count:,} | {unit} | {max_length:,} | {vocabulary.rows.nbytes / MIB:.1f} | {counted} | "
              f"{peak / MIB:.1f} | {statistics.median(times) * 1000:.0f} |")


if __name__ == "__main__":
    main()
