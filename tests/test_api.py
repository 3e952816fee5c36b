"""The Python API (``fedhh.__all__``): ``fedhh.run`` and its ``Result``, ``fedhh.load_sweep``.

* the README's example runs as it is written (a doctest), in a folder where
  the sweep it reads exists;
* ``fedhh.run`` finds, for a seed, what ``fedhh run --set run.driver=fast``
  writes to ``result.json``: the same heavy hitters and rounds;
* bad input raises ``InputError`` before anything runs or is written, and an
  ``output`` folder follows the rules of every fedhh writer;
* ``import fedhh`` loads nothing of the API until a name is used.
"""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import fedhh
from fedhh.results import MARKER
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"population.source": "zipf", "population.users": 20_000, "population.vocabulary": 2_000,
         "population.item_length": 5, "protocol.max_length": 6, "privacy.delta": 1e-6}
SWEEP = """
[population]
source = "zipf"
users = 5000
vocabulary = 500
item_length = 4
[protocol]
max_length = 4
[sweep]
trials = 2
"privacy.epsilon" = [2, 4]
"""


def readme_example() -> str:
    """The README's Python example: the ``pycon`` block of its "From Python" paragraph."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("**From Python.**"):]
    start = section.index("```pycon\n") + len("```pycon\n")
    return section[start: section.index("\n```", start) + 1]


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP, encoding="utf-8")
    folder = tmp_path / "results" / "sweeps" / "triehh-fig3-population"
    assert main(["sweep", str(sweep), "--output", str(folder), "--workers", "1", "--quiet"]) == 0
    monkeypatch.chdir(tmp_path)
    example = readme_example()
    assert ">>> import fedhh" in example and "fedhh.load_sweep" in example
    test = doctest.DocTestParser().get_doctest(example, {}, "README.md", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    outcome = runner.summarize(verbose=False)
    assert outcome.attempted >= 6 and outcome.failed == 0


def test_all_is_what_the_readme_and_the_docs_list() -> None:
    assert sorted(fedhh.__all__) == sorted(
        ["run", "Result", "load_sweep", "Sweep", "load_config", "Config", "InputError", "__version__"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme[readme.index("**From Python.**"):readme.index("```pycon")]
    page = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    for name in fedhh.__all__:
        assert f"`{name}`" in paragraph, f"the README's Python paragraph does not list {name}"
        assert f"| `fedhh.{name}" in page, f"docs/python.md does not list fedhh.{name}"
        assert getattr(fedhh, name) is not None
    assert set(fedhh.__all__) <= set(dir(fedhh))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        fedhh.nothing  # noqa: B018


def test_importing_fedhh_loads_nothing_until_a_name_is_used() -> None:
    code = ("import sys, fedhh\n"
            "before = sorted(m for m in ('fedhh.api', 'numpy', 'fedhh.experiment') if m in sys.modules)\n"
            "fedhh.run\nprint(before, 'fedhh.api' in sys.modules)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert completed.stdout.strip() == "[] True"


@pytest.mark.parametrize("protocol", ["triehh", "pem"])
def test_a_run_finds_what_the_fast_driver_of_the_command_line_finds(tmp_path: Path, protocol: str) -> None:
    settings = {**SMALL, "protocol.name": protocol, "run.seed": 7}
    argv = ["run", "--set", 'run.driver="fast"', "--output", str(tmp_path / "cli"), "--quiet"]
    for key, value in settings.items():
        argv += ["--set", f"{key}={json.dumps(value)}"]
    assert main(argv) == 0
    written = json.loads((tmp_path / "cli" / "result.json").read_text(encoding="utf-8"))
    result = fedhh.run(None, settings)
    assert result.heavy_hitters == written["heavy_hitters"] and len(result.heavy_hitters) >= 3
    assert result.document["rounds"] == written["rounds"]
    assert result.metrics == written["evaluation"]["metrics"]
    assert result.privacy.to_dict() == written["privacy"]
    assert result.to_dict()["config"] == written["config"] and result.config.to_dict() == written["config"]
    assert result.path is None
    assert repr(result).startswith(f"<fedhh.Result {protocol}: {len(result.heavy_hitters)} heavy hitters")


def test_the_config_may_be_a_path_a_mapping_or_a_config_with_overrides_either_way(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    sections: dict[str, dict[str, object]] = {}
    for dotted, value in SMALL.items():
        section, key = dotted.split(".")
        sections.setdefault(section, {})[key] = value
    tables = [f"[{section}]\n" + "\n".join(f"{key} = {json.dumps(value)}" for key, value in values.items())
              for section, values in sections.items()]
    path.write_text("\n".join(tables) + "\n", encoding="utf-8")
    reference = fedhh.run(path, {"privacy.epsilon": 2.0}).heavy_hitters
    assert fedhh.run(str(path), **{"privacy.epsilon": 2.0}).heavy_hitters == reference
    assert fedhh.run(sections, {"privacy.epsilon": 2.0}).heavy_hitters == reference
    config = fedhh.load_config(path, ["privacy.epsilon=2.0"])
    assert isinstance(config, fedhh.Config) and fedhh.run(config).heavy_hitters == reference
    assert fedhh.run(config, {"privacy.epsilon": 2.0}, **{"privacy.epsilon": 2.0}).heavy_hitters == reference
    assert fedhh.run(config, {"privacy.epsilon": 8.0}).heavy_hitters != reference


@pytest.mark.parametrize(("config", "overrides", "settings", "message"), [
    (None, {"privacy.epsilon": 0}, {}, "privacy.epsilon: got 0.0; must be a finite number > 0"),
    (None, {"privacy.epsilon": 2}, {"privacy.epsilon": 3}, "privacy.epsilon: given twice"),
    (None, {"epsilon": 2}, {}, "'epsilon' is not a dotted config key"),
    (None, None, {"epsilon": 2}, "epsilon: not an option of fedhh.run"),
    (None, ["privacy.epsilon=2"], {}, "overrides: a mapping of dotted keys"),
    (None, {"privacy.nothing": 1}, {}, "privacy.nothing: unknown key"),
    (None, {"run.backend": "ray"}, {}, "run.backend: fedhh.run runs in this process"),
    (None, {"run.federation": "devices"}, {}, "run.federation:"),
    (42, None, {}, "config: a TOML file's path, a mapping of sections"),
    ("no-such-config.toml", None, {}, "does not exist"),
])
def test_bad_input_is_one_input_error_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: object, overrides: object, settings: dict[str, object],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(fedhh.InputError, match=message.replace("(", r"\(").replace(".", r"\.")):
        fedhh.run(config, overrides, output=tmp_path / "out", **settings)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_output_writes_a_results_folder_like_fedhh_run_and_never_over_a_user_s_files(tmp_path: Path) -> None:
    result = fedhh.run(None, SMALL, output=tmp_path / "run")
    assert result.path == tmp_path / "run"
    assert {path.name for path in result.path.iterdir()} == {"result.json", "heavy_hitters.csv", "rounds.csv", MARKER}
    written = json.loads((result.path / "result.json").read_text(encoding="utf-8"))
    assert written["heavy_hitters"] == result.heavy_hitters
    with pytest.raises(fedhh.InputError, match="overwrite=True"):
        fedhh.run(None, SMALL, output=tmp_path / "run")
    assert fedhh.run(None, SMALL, output=tmp_path / "run", overwrite=True).heavy_hitters == result.heavy_hitters
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes", encoding="utf-8")
    with pytest.raises(fedhh.InputError, match="output"):
        fedhh.run(None, SMALL, output=mine, overwrite=True)
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]


def test_items_is_the_heavy_hitters_csv_as_a_typed_table(tmp_path: Path) -> None:
    result = fedhh.run(None, {**SMALL, "protocol.name": "pem"}, output=tmp_path / "run")
    table = result.items()
    assert table.schema == pa.schema([("item", pa.string()), ("support", pa.int64()), ("estimated_count", pa.float64()),
                                      ("true_rank", pa.int64()), ("true_count", pa.int64()),
                                      ("true_frequency", pa.float64())])
    assert table.column("item").to_pylist() == [hit["item"] for hit in result.heavy_hitters]
    assert table.column("support").null_count == table.num_rows  # PEM estimates counts, it has no votes
    csv_rows = (result.path / "heavy_hitters.csv").read_text(encoding="utf-8").splitlines()
    assert csv_rows[0].split(",") == table.column_names and len(csv_rows) == table.num_rows + 1
    unevaluated = fedhh.run(None, {**SMALL, "run.evaluation": False})
    assert unevaluated.metrics is None
    assert unevaluated.items().column_names == ["item", "support", "estimated_count"]


def test_load_sweep_reads_the_tables_and_refuses_a_folder_without_a_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP, encoding="utf-8")
    assert main(["sweep", str(sweep), "--output", str(tmp_path / "out"), "--workers", "1", "--quiet"]) == 0
    trials, items = fedhh.load_sweep(tmp_path / "out")
    assert trials.num_rows == 4 and sorted(set(trials.column("privacy.epsilon").to_pylist())) == [2.0, 4.0]
    assert items.num_rows > 0
    assert set(items.column("trial_key").to_pylist()) <= set(trials.column("trial_key").to_pylist())
    with pytest.raises(fedhh.InputError, match="holds no sweep"):
        fedhh.load_sweep(tmp_path)
    (tmp_path / "out" / "items.parquet").unlink()
    with pytest.raises(fedhh.InputError, match="missing; run the sweep again"):
        fedhh.load_sweep(tmp_path / "out")


def test_a_ledger_is_charged_once_per_run_and_a_run_over_its_budget_is_refused_before_it_runs(tmp_path: Path) -> None:
    from fedhh.privacy.ledger import Ledger

    ledger = tmp_path / "ledger.json"
    settings = {**SMALL, "privacy.ledger": str(ledger), "privacy.max_epsilon": 10.0}
    first = fedhh.run(None, settings)
    (entry,) = Ledger(ledger).entries
    assert entry.run_id.startswith("fedhh.run@") and first.privacy.to_dict()["composition"]["runs"] == 1
    second = fedhh.run(None, settings, output=tmp_path / "day-2")
    assert [entry.run_id.split("@")[0] for entry in Ledger(ledger).entries] == ["fedhh.run", "day-2"]
    assert second.privacy.to_dict()["composition"]["runs"] == 2
    with pytest.raises(fedhh.InputError, match=r"privacy\.max_epsilon"):
        fedhh.run(None, settings, output=tmp_path / "day-3")
    assert len(Ledger(ledger).entries) == 2 and not (tmp_path / "day-3").exists()


def test_a_law_simulation_runs_a_billion_users_in_this_process() -> None:
    """``run.simulation = "law"``: each shard holds item counts, not users (``docs/simulation.md``)."""
    result = fedhh.run(None, {"run.simulation": "law", "population.users": 1_000_000_000})
    assert result.document["simulation"] == "law" and result.document["n_users"] == 1_000_000_000
    assert {"the", "of", "and", "to", "in"} <= {hit["item"] for hit in result.heavy_hitters}
    assert result.metrics is not None and result.metrics["recall_at_k"]["10"] == 1.0
