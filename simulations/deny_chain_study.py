"""Cumulative discovery over a chain of runs, with and without a deny list, at equal total budget.

A daily job runs discovery again and again on the same users.  Without a
deny list every run spends its budget on the same head; with one
(``run.deny_list``), run ``r`` leaves out every item runs ``1 .. r-1`` found,
so its budget goes to the next items.  Both arms run the same ``runs``
configs (the same (ε, δ) and parameters each run), so the ledger charges
them the same total: the budget is equal by construction, and is written
out composed.

Each trial is one chain of runs on one population (drawn once, with the
config's ``run.seed``, and shared by every trial: the intervals cover the
protocol's randomness, as in ``docs/studies.md``); run ``r`` of trial ``t``
has seed ``trial_seed(seed, t * runs + r)`` in both arms, so the first run
of each chain is the same in both.  What is measured after each run is the
union of the discoveries so far against the population's true top ``K``
(the population without any deny list): recall@K of the union, and the
number of distinct items found.

    python -m simulations.deny_chain_study --output results/studies/deny-list-chain \
        --figure docs/figures/deny-list-cumulative-discovery.png

writes ``study.json`` (every run's discoveries counts, the per-run and
composed guarantees, the means and intervals) to ``--output`` and the figure.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedhh.config import FedhhConfig, load_config
from fedhh.data.population import PopulationSource, Shard
from fedhh.data.sources import make_source
from fedhh.driving import drive
from fedhh.errors import InputError
from fedhh.experiment import Experiment, item_codec
from fedhh.privacy.composition import compose
from fedhh.protocols import Request, Response
from fedhh.results import ResultsFolder

from .sweep_intervals import METHODS, over_trials
from .sweep_spec import trial_seed

ARMS = ("without deny list", "with deny list")


def _answer(experiment: Experiment, shard: Shard, request: Request) -> list[Response]:
    return [experiment.respond(request, shard, experiment.randomness)]


def run_chain(
    config: FedhhConfig, source: PopulationSource, runs: int, trial: int, deny: bool, folder: Path, top: list[str]
) -> list[dict[str, Any]]:
    """One chain of ``runs`` runs; per run, what it found and the union so far against ``top``."""
    found_so_far: list[str] = []
    rows = []
    seed = config.run.seed
    for run in range(runs):
        overrides: dict[str, Any] = {"run.seed": trial_seed(seed, trial * runs + run)}
        if deny and found_so_far:
            path = folder / f"deny-{trial}-{run}.txt"
            path.write_text("".join(f"{item}\n" for item in found_so_far), encoding="utf-8")
            overrides["run.deny_list"] = str(path)
        experiment = Experiment(config.with_overrides(overrides), source=source)
        shard = experiment.build_shard(0, 1)
        server = experiment.make_server()
        result = drive(server, functools.partial(_answer, experiment, shard))
        document = experiment.finish(result, {}, "fast/inprocess", counts=shard.counts())
        found = [hit["item"] for hit in document["heavy_hitters"]]
        new = [item for item in found if item not in set(found_so_far)]
        found_so_far.extend(new)
        union = set(found_so_far)
        rows.append(
            {
                "trial": trial,
                "arm": ARMS[deny],
                "run": run + 1,
                "found": len(found),
                "new": len(new),
                "cumulative_found": len(union),
                "cumulative_recall": sum(item in union for item in top) / len(top),
                "epsilon": experiment.privacy.epsilon,
                "delta": experiment.privacy.delta,
            }
        )
    return rows


def study(config: FedhhConfig, trials: int, runs: int, top_k: int) -> dict[str, Any]:
    """Both arms' chains for ``trials`` trials, with the means and intervals per run."""
    source = make_source(config["population"], item_codec(config), config.run.seed)
    truth = Experiment(config, source=source).truth()
    top = truth.top(top_k)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fedhh-deny-chain-") as scratch:
        for trial in range(trials):
            for deny in (False, True):
                rows.extend(run_chain(config, source, runs, trial, deny, Path(scratch), top))
    seconds = time.perf_counter() - started
    summary = {}
    for arm in ARMS:
        for metric in ("cumulative_recall", "cumulative_found"):
            values = np.array(
                [[row[metric] for row in rows if row["arm"] == arm and row["trial"] == t] for t in range(trials)],
                dtype=np.float64,
            )
            interval = over_trials(values)
            summary[f"{arm}: {metric}"] = {
                "mean": interval.mean.tolist(),
                "low": interval.low.tolist(),
                "high": interval.high.tolist(),
                "interval": METHODS[str(interval.method[0])],
            }
    per_run = (rows[0]["epsilon"], rows[0]["delta"])
    total = compose([per_run] * runs)
    return {
        "config": config.to_dict(),
        "trials": trials,
        "runs": runs,
        "top_k": top_k,
        "per_run_guarantee": {"epsilon": per_run[0], "delta": per_run[1]},
        "total_guarantee_each_arm": total.to_dict(),
        "summary": summary,
        "rows": rows,
        "seconds": seconds,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = np.arange(1, result["runs"] + 1)
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for axis, metric, label in (
        (axes[0], "cumulative_recall", f"recall@{result['top_k']} of the runs' union"),
        (axes[1], "cumulative_found", "distinct items found so far"),
    ):
        for arm, colour, style in zip(ARMS, ("tab:grey", "tab:blue"), ("-", "--"), strict=True):
            line = result["summary"][f"{arm}: {metric}"]
            axis.plot(runs, line["mean"], marker="o", linestyle=style, color=colour, label=arm)
            axis.fill_between(runs, line["low"], line["high"], color=colour, alpha=0.2)
        axis.set_xlabel("runs so far")
        axis.set_ylabel(label)
        axis.set_xticks(runs)
        axis.grid(alpha=0.3)
    guarantee = result["per_run_guarantee"]
    total = result["total_guarantee_each_arm"]
    protocol = result["config"]["protocol"]["name"]
    users = result["config"]["population"]["users"]
    figure.suptitle(
        f"{protocol}, {users:,} wordfreq users: {result['runs']} runs of ε = {guarantee['epsilon']:.3g} each "
        f"(composed ε = {total['epsilon']:.3g} at δ = {total['delta']:.2g} in both arms), {result['trials']} trials"
    )
    axes[0].legend(loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="TOML config of every run (default: the defaults)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top-k", type=int, default=200, help="K of the true top K the union is measured against")
    parser.add_argument("--output", default="results/studies/deny-list-chain")
    parser.add_argument("--figure", default="", help="also write the figure here (a .png)")
    args = parser.parse_args(argv)
    try:
        if min(args.trials, args.runs, args.top_k) < 1:
            raise InputError("--trials, --runs, --top-k: must be >= 1")
        config = load_config(args.config, args.set)
        if config.run.deny_list:
            raise InputError("run.deny_list: the study sets each run's deny list itself; leave it empty")
        with ResultsFolder.claim(args.output, field="--output") as folder:
            result = study(config, args.trials, args.runs, args.top_k)
            figure = Path(args.figure) if args.figure else None
            folder.commit(result, [lambda staging: plot(result, staging / "cumulative-discovery.png")], "study.json")
    except InputError as error:
        parser.exit(2, f"error: {error}\n")
    if figure is not None:
        plot(result, figure)
    print(f"{args.trials} trials x {args.runs} runs x 2 arms in {result['seconds']:.0f} s; results in {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
