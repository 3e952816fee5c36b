"""fedhh from Python: run an experiment and read its result, read a sweep's tables.

What ``import fedhh`` exports (:data:`fedhh.__all__`, imported on first use
so that ``import fedhh`` itself costs nothing): :func:`run` and its
:class:`Result`, :func:`~fedhh.studies.load_sweep` and its
:class:`~fedhh.studies.Sweep`, :func:`~fedhh.config.load_config` and
:data:`Config`, and :class:`~fedhh.errors.InputError`.

:func:`run` runs in this process, on the fast driver's loop
(:func:`fedhh.driving.run_over_shards`): for a seed it finds what
``fedhh run --set run.driver=fast`` finds, and what every other driver
finds, without Flower or Ray.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import ConfigError, FedhhConfig, build_config, fixed_shards, load_config, with_fixed_shards
from .driving import run_over_shards
from .errors import InputError
from .experiment import Experiment
from .privacy.charge import charge_run, check_budget, run_label
from .privacy.report import PrivacyReport
from .result_tables import discoveries_with_truth, heavy_hitter_columns, table_writers
from .results import ResultsFolder, write_result
from .studies import Sweep, load_sweep

if TYPE_CHECKING:
    import pyarrow

__all__ = ["Config", "InputError", "Result", "Sweep", "load_config", "load_sweep", "run"]

Config = FedhhConfig  # a validated config: fedhh.load_config(path, ["section.key=value", ...])

TRANSPORT = "fast/inprocess"  # what carried the rounds, as result.json names it
LEDGER_NAME = "fedhh.run"  # the ledger's name for a run that writes no results folder (with the time)


@dataclass(frozen=True)
class Result:
    """One run's outcome: what ``fedhh run`` writes to ``result.json``, read as Python.

    ``privacy`` is the run's (ε, δ) guarantee with its model, mechanism and
    coverage (and, with ``privacy.ledger``, the cumulative guarantee of the
    runs the ledger composes); ``path`` the results folder when :func:`run`
    was given ``output``.  The document's fields are described in
    ``docs/results.md``.
    """

    document: dict[str, Any]
    privacy: PrivacyReport
    path: Path | None = None

    @property
    def heavy_hitters(self) -> list[dict[str, Any]]:
        """The published discoveries, most frequent first: ``item`` and the protocol's number
        (``support``, TrieHH's votes, or ``estimated_count``, the LDP protocols')."""
        return copy.deepcopy(self.document["heavy_hitters"])

    @property
    def metrics(self) -> dict[str, Any] | None:
        """Recall@K, precision, F1 and NCR against the true top items (``docs/results.md``); ``None``
        with ``run.evaluation = false``, when the truth is not looked at."""
        evaluation = self.document.get("evaluation")
        return copy.deepcopy(evaluation["metrics"]) if evaluation is not None else None

    @property
    def config(self) -> FedhhConfig:
        """The config the run ran (every key, defaults included)."""
        return build_config(self.document["config"])

    def to_dict(self) -> dict[str, Any]:
        """The whole result document, as ``result.json`` holds it (a copy)."""
        return copy.deepcopy(self.document)

    def items(self) -> pyarrow.Table:
        """The discoveries as a pyarrow table, one row per item in the order of
        :attr:`heavy_hitters`: ``item``, ``support``, ``estimated_count`` (null where the
        protocol has none) and, with an evaluation, ``true_rank`` (null for an item outside the
        population), ``true_count`` and ``true_frequency``; the rows of ``heavy_hitters.csv``."""
        import pyarrow as pa

        columns = heavy_hitter_columns(self.document)
        rows = discoveries_with_truth(self.document)
        types = {
            "item": pa.string(),
            "support": pa.int64(),
            "estimated_count": pa.float64(),
            "true_rank": pa.int64(),
            "true_count": pa.int64(),
            "true_frequency": pa.float64(),
        }
        return pa.table({column: pa.array([row.get(column) for row in rows], type=types[column]) for column in columns})

    def __repr__(self) -> str:
        found = ", ".join(hit["item"] for hit in self.document["heavy_hitters"][:5])
        more = len(self.document["heavy_hitters"]) - 5
        metrics = self.metrics
        recall = f", f1={metrics['f1']:.3g}" if metrics is not None else ""
        return (
            f"<fedhh.Result {self.document['protocol']}: {len(self.document['heavy_hitters'])} heavy hitters "
            f"[{found}{f', ... {more} more' if more > 0 else ''}]{recall}, ε={self.privacy.epsilon:.4g}, "
            f"δ={self.privacy.delta:.3g}>"
        )


ConfigLike = str | os.PathLike[str] | Mapping[str, Any] | FedhhConfig | None


def run(
    config: ConfigLike = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    output: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    **settings: Any,
) -> Result:
    """Run one experiment in this process and return its :class:`Result`.

    ``config`` is a TOML file's path, a mapping of sections
    (``{"privacy": {"epsilon": 2}}``), a :data:`Config`, or ``None`` for
    the defaults.  Overrides are dotted keys, given as a mapping or as
    keyword arguments, and checked like ``--set`` (a key given both ways
    must have one value)::

        fedhh.run("configs/pem-wordfreq.toml", {"privacy.epsilon": 2, "population.users": 100_000})
        fedhh.run("configs/pem-wordfreq.toml", **{"privacy.epsilon": 2})

    The rounds run in this process (whatever ``run.driver`` says, which
    is recorded as ``"fast"``: for a seed, the result of ``fedhh run
    --set run.driver=fast``); ``run.backend = "ray"`` is refused (the
    command line runs on Ray).  ``privacy.ledger`` is charged as by
    ``fedhh run``.  Nothing is written unless ``output`` names a results
    folder, written like ``fedhh run --output`` (new or empty; a previous
    fedhh result there is replaced only with ``overwrite``): ``result.json``,
    ``heavy_hitters.csv`` and ``rounds.csv`` (plots are the command line's).
    Bad input raises :class:`InputError`, before anything runs or is charged.
    """
    started = time.perf_counter()
    # run.shards = "auto" (a Flower federation's SuperNodes decide) is the default number of shards here
    chosen = with_fixed_shards(_config_of(config, {**_checked_overrides(overrides, settings), "run.driver": "fast"}))
    num_shards = fixed_shards(chosen)
    assert num_shards is not None
    if chosen.run.backend == "ray":
        raise ConfigError(
            'run.backend: fedhh.run runs in this process; allowed here: "auto", "inprocess" '
            "(on Ray: fedhh run --set run.driver=fast --set run.backend=ray)"
        )
    if chosen.run.federation == "devices":
        raise ConfigError(
            'run.federation: "devices" means real devices hold their own data (docs/deployment.md); '
            'fedhh.run simulates shards: use "shards"'
        )
    claim = (
        ResultsFolder.claim(Path(output), overwrite=overwrite, field="output", overwrite_hint="overwrite=True")
        if output is not None
        else contextlib.nullcontext()
    )
    with claim as folder:
        experiment = Experiment(chosen)
        population_s = time.perf_counter() - started
        run_id = run_label(folder.path.name if folder is not None else LEDGER_NAME)
        check_budget(chosen["privacy"], experiment.privacy, run_id)
        charged: list[PrivacyReport] = []  # once the shards are placed, as the fast driver does
        shards = run_over_shards(
            experiment,
            num_shards,
            when_placed=lambda: charged.append(charge_run(chosen["privacy"], experiment.privacy, run_id)),
        )
        document = experiment.finish(
            shards.result, {"population_s": population_s, **shards.timing}, TRANSPORT, counts=shards.counts
        )
        document["privacy"] = charged[0].to_dict()
        document["timing_s"]["total_s"] = time.perf_counter() - started
        path = write_result(folder, document, table_writers(document)).parent if folder is not None else None
    return Result(document, charged[0], path)


def _checked_overrides(overrides: Mapping[str, Any] | None, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides given as a mapping and as keyword arguments, merged; every key dotted, none twice."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise InputError(
            f"overrides: a mapping of dotted keys to values, e.g. {{'privacy.epsilon': 2}}; "
            f"got {type(overrides).__name__}"
        )
    merged = dict(overrides or {})
    for key, value in settings.items():
        if "." not in key:
            raise InputError(
                f"{key}: not an option of fedhh.run (config, overrides, output, overwrite) nor a "
                "dotted config key such as privacy.epsilon, passed as **{'privacy.epsilon': 2}"
            )
        if key in merged and merged[key] != value:
            raise InputError(f"{key}: given twice, as {merged[key]!r} in overrides and as {value!r}")
        merged[key] = value
    for key in merged:
        if not isinstance(key, str) or "." not in key:
            raise InputError(f"overrides: {key!r} is not a dotted config key such as privacy.epsilon")
    return merged


def _config_of(config: ConfigLike, overrides: Mapping[str, Any]) -> FedhhConfig:
    """``config`` (a path, a mapping of sections, a config or ``None``) with ``overrides`` applied."""
    if config is None or isinstance(config, (str, os.PathLike)):
        base = load_config(None if config is None else Path(config))
    elif isinstance(config, FedhhConfig):
        base = config
    elif isinstance(config, Mapping):
        base = build_config(config)
    else:
        raise InputError(
            f"config: a TOML file's path, a mapping of sections, a fedhh.Config or None; got {type(config).__name__}"
        )
    return base.with_overrides(overrides)
