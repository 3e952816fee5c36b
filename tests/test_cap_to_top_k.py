"""``run.cap_to_top_k``: any protocol's reported list capped at its ``run.top_k`` best by its own numbers.

TrieHH reports every word above its threshold, so its F1 at a fixed K is not comparable with a
protocol that reports K; with the cap on, the result keeps the K words of most votes, says so in
``cap_to_top_k``, and every metric (result.json's evaluation, a sweep's tables) is of the capped list.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from fedhh.config import load_config
from fedhh.experiment import Experiment
from simulations.cli import main
from simulations.fast import run_fast

SMALL = ['population.source="zipf"', "population.users=40000", "population.vocabulary=500",
         "population.item_length=4", "protocol.max_length=4", "privacy.epsilon=8", "privacy.delta=1e-9",
         "run.top_k=10", "run.seed=3", 'protocol.name="triehh"']


def document(*settings: str) -> dict:
    experiment = Experiment(load_config(None, [*SMALL, *settings]))
    fast = run_fast(experiment, 2, "inprocess")
    return experiment.finish(fast.result, fast.timing, "fast/inprocess", counts=fast.counts)


def test_the_cap_keeps_the_protocol_s_best_k_and_says_so() -> None:
    whole = document()
    capped = document("run.cap_to_top_k=true")
    found = whole["heavy_hitters"]
    assert len(found) > 10 and "cap_to_top_k" not in whole
    assert capped["heavy_hitters"] == found[:10]  # the 10 of most votes, in the protocol's own order
    supports = [hit["support"] for hit in found]
    assert supports == sorted(supports, reverse=True) and supports[9] >= supports[10]
    assert capped["cap_to_top_k"]["top_k"] == 10 and capped["cap_to_top_k"]["found"] == len(found)
    assert capped["cap_to_top_k"]["reported"] == 10 and capped["config"]["run"]["cap_to_top_k"] is True
    metrics, uncapped = capped["evaluation"]["metrics"], whole["evaluation"]["metrics"]
    assert metrics["discovered"] == 10 and uncapped["discovered"] == len(found)
    assert metrics["precision"] > uncapped["precision"]  # the extra words were outside the true top 10


def test_a_sweep_reports_the_capped_list(tmp_path: Path) -> None:
    sweep = tmp_path / "cap.toml"  # SMALL's population, protocol and target
    sweep.write_text(
        '[population]\nsource = "zipf"\nusers = 40000\nvocabulary = 500\nitem_length = 4\n'
        '[protocol]\nmax_length = 4\n[privacy]\nepsilon = 8\ndelta = 1e-9\n[run]\ntop_k = 10\n'
        '[sweep]\ntrials = 1\nitems = 20\n"run.cap_to_top_k" = [false, true]\n', encoding="utf-8")
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    rows = {row["run.cap_to_top_k"]: row for row in pq.read_table(output / "trials.parquet").to_pylist()}
    assert rows[False]["discovered"] == rows[False]["found_before_cap"] == rows[True]["found_before_cap"] > 10
    assert rows[True]["discovered"] == 10 and rows[True]["precision"] > rows[False]["precision"]
    items = pq.read_table(output / "items.parquet").to_pylist()
    found = {key: sum(item["discovered"] for item in items if item["trial_key"] == rows[key]["trial_key"])
             for key in rows}
    assert found[True] <= 10 and found[False] > found[True]  # the items table marks the capped list
