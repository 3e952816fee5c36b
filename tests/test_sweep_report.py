"""fedhh report: plot files, the plotted numbers against the tables, the models, nothing pooled unless asked,
intervals that stay in bounds, bad arguments."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from simulations.analytic import triehh_rate
from simulations.cli import main
from simulations.sweep_figures import display_names, draw
from simulations.sweep_report import PlotRequest, build_plot, plan_plots
from simulations.sweep_tables import SweepTables
from simulations.sweep_trial import ITEM_COLUMNS

from .test_sweep import TINY

PEM = """
[population]
source = "zipf"
users = 20_000
vocabulary = 2000
item_length = 5
[protocol]
max_length = 5
top_k = 8
candidates_per_step = 8
[privacy]
epsilon = 4
[run]
top_k = 8
[sweep]
trials = 2
items = 40
[sweep.zip]
"protocol.name" = ["pem", "treehist"]
"protocol.oracle" = ["olh", "flh"]
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    sweep = folder / "study.toml"
    sweep.write_text(TINY, encoding="utf-8")
    output = folder / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    return output


def group_means(output: Path, x: str, y: str, hue: str) -> dict[tuple[float, float], float]:
    """Mean of ``y`` per (hue, x), straight from the table."""
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    cells: dict[tuple[float, float], list[float]] = {}
    for row in rows:
        cells.setdefault((row[hue], row[x]), []).append(row[y])
    return {key: float(np.mean(values)) for key, values in cells.items()}


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))[1:]


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_report_writes_plots_and_summary(swept: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(swept)]) == 0
    listed = capsys.readouterr().out.split()
    report = swept / "report"
    stems = ["recall_at_10-vs-population.users-by-privacy.epsilon", "f1-vs-population.users-by-privacy.epsilon",
             "ncr-vs-population.users-by-privacy.epsilon", "recall-vs-k-by-population.users-per-privacy.epsilon",
             "discovery-vs-frequency-by-population.users-per-privacy.epsilon"]
    for stem in stems:
        for kind in ("png", "svg", "csv"):
            path = report / f"{stem}.{kind}"
            assert path.is_file() and path.stat().st_size > 0, path
            assert str(path) in listed
    assert (report / f"{stems[0]}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (report / f"{stems[1]}.svg").read_text(encoding="utf-8")
    summary = (report / "summary.md").read_text(encoding="utf-8")
    assert summary.count("\n| 20,000 |") + summary.count("\n| 40,000 |") == 4  # one row per grid point
    assert f"![{stems[0]}]({stems[0]}.png)" in summary


def test_plotted_means_equal_the_table_means(swept: Path, tmp_path: Path) -> None:
    assert main(["report", str(swept), "--x", "population.users", "--y", "f1", "--hue", "privacy.epsilon",
                 "--output", str(tmp_path)]) == 0
    expected = group_means(swept, "population.users", "f1", "privacy.epsilon")
    rows = read_rows(tmp_path / "f1-vs-population.users-by-privacy.epsilon.csv")
    plotted = {(float(r["privacy.epsilon"]), float(r["population.users"])): float(r["mean"]) for r in rows}
    assert plotted == pytest.approx(expected, abs=1e-12) and len(plotted) == 4
    assert {r["method"] for r in rows} == {"range"} and {r["trials"] for r in rows} == {"2"}
    plot = build_plot(SweepTables(swept), PlotRequest("population.users", "f1", hue="privacy.epsilon"))
    figure = draw(plot)
    drawn = [line for line in figure.axes[0].lines if not line.get_label().startswith("_")]
    assert len(drawn) == 2
    for line, curve in zip(drawn, plot.curves):
        assert list(line.get_xdata()) == [20_000.0, 40_000.0]
        assert list(line.get_ydata()) == pytest.approx([expected[(curve.hue, n)] for n in (20_000, 40_000)])


def test_recall_against_k_agrees_with_the_recall_columns(swept: Path) -> None:
    """The per-item table and the per-trial table tell the same story."""
    plot = build_plot(SweepTables(swept), PlotRequest("k", "recall", hue="population.users", col="privacy.epsilon"))
    for curve in plot.curves:
        for k in (1, 5, 10, 25, 50):
            expected = group_means(swept, "privacy.epsilon", f"recall_at_{k}", "population.users")
            assert curve.interval.mean[k - 1] == pytest.approx(expected[(curve.hue, curve.col)], abs=1e-12)


def test_triehh_bound_is_drawn_at_the_runs_parameters(swept: Path) -> None:
    tables = SweepTables(swept)
    plot = build_plot(tables, PlotRequest("frequency", "discovery", hue="population.users", col="privacy.epsilon"))
    assert list(plot.model_labels) == ["TrieHH worst-case bound (Prop. 1, one item per user)"] and len(plot.curves) == 4
    rows = pq.read_table(swept / "trials.parquet").to_pylist()
    for curve in plot.curves:
        row = next(r for r in rows if (r["population.users"], r["privacy.epsilon"]) == (curve.hue, curve.col))
        (model,) = curve.models
        assert model.y == pytest.approx(triehh_rate(
            model.x, row["n"], row["param.batch_size"], row["param.theta"], row["param.max_rounds"]))
        assert np.all(np.diff(model.y) >= -1e-12)  # more holders, more often found
        assert model.y[0] < 0.05 and model.y[-1] > 0.95
        assert np.all((0 <= model.at_points) & (model.at_points <= 1)) and model.at_points.size == curve.x.size
    dense = build_plot(tables, PlotRequest("population.users", "discovery", hue="privacy.epsilon"), frequency=0.01)
    assert next(iter(dense.model_labels)).startswith("TrieHH worst-case bound at frequency 0.01")
    assert all(curve.models[0].x.size > 2 for curve in dense.curves)


def test_pem_prediction_sits_beside_its_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "pem.toml"
    sweep.write_text(PEM, encoding="utf-8")
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    pem = [row for row in rows if row["protocol"] == "pem"]
    treehist = [row for row in rows if row["protocol"] == "treehist"]
    for column in ("predicted_ncr", "predicted_f1", "predicted_eq5_ncr", "predicted_eq5_f1",
                   "predicted_eq5_recall_at_5"):
        assert pem and all(0 <= row[column] <= 1 for row in pem), column
    assert all(0 <= row["predicted_ncr"] <= 1 and row["predicted_eq5_ncr"] is None for row in treehist)
    assert all(row["predicted_f1"] is None for row in treehist)  # TreeHist's model does not give F1
    items = pq.read_table(output / "items.parquet").to_pylist()
    for column in ("predicted", "predicted_eq5"):
        predicted = [item[column] for item in items if item["trial_key"] == pem[0]["trial_key"]]
        assert all(0 <= p <= 1 for p in predicted[:8]) and predicted[8:] == [0.0] * (len(predicted) - 8)
    assert [item["predicted_eq5"] for item in items if item["trial_key"] == treehist[0]["trial_key"]] == [None] * 40
    tables = SweepTables(output)
    axis = "protocol.name,protocol.oracle"  # a zipped group is one axis
    assert tables.swept == [axis] and plan_plots(tables, None, "ncr") == ([PlotRequest(axis, "ncr")], [])
    plot = build_plot(tables, PlotRequest(axis, "ncr"))
    assert list(plot.model_labels) == ["PEM order-statistics model", "TreeHist planner's model", "PEM [Wang19] eq. (5)"]
    assert list(plot.curves[0].x) == [("pem", "olh"), ("treehist", "flh")]
    models = {line.label: line.at_points for line in plot.curves[0].models}  # each protocol's own, at its point
    assert models["PEM order-statistics model"][0] == pytest.approx(np.mean([row["predicted_ncr"] for row in pem]))
    assert models["PEM [Wang19] eq. (5)"][0] == pytest.approx(np.mean([row["predicted_eq5_ncr"] for row in pem]))
    assert models["TreeHist planner's model"][1] == pytest.approx(np.mean([row["predicted_ncr"] for row in treehist]))
    assert np.isnan(models["PEM [Wang19] eq. (5)"][1]) and np.isnan(models["TreeHist planner's model"][0])
    assert main(["report", str(output), "--x", "protocol.name", "--y", "f1", "--output", str(tmp_path / "r")]) == 0
    exported = read_rows(tmp_path / "r" / "f1-vs-protocol.name.csv")  # one key of the zipped group places it
    assert [row["protocol.name"] for row in exported] == ["pem", "treehist"]
    pem_row, treehist_row = exported
    assert float(pem_row["model: PEM order-statistics model"]) == pytest.approx(
        np.mean([r["predicted_f1"] for r in pem]))
    assert float(pem_row["model: PEM [Wang19] eq. (5)"]) == pytest.approx(np.mean([r["predicted_eq5_f1"] for r in pem]))
    assert treehist_row["model: PEM order-statistics model"] == ""
    assert "model: TreeHist planner's model" not in pem_row  # TreeHist's model does not give F1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--x", "population.user"], "--x population.user"),
        (["--y", "recall_at_7"], "--y recall_at_7"),
        (["--x", "k", "--y", "f1"], "--y f1"),
        (["--hue", "privacy.epsilonn"], "--hue privacy.epsilonn"),
        (["--frequency", "2"], "--frequency"),
        (["--y", "recall@51", "--x", "privacy.epsilon", "--hue", "population.users"],
         "--y recall@51: the items table holds the true top 50"),
        (["--pool", "privacy.delta"], "--pool privacy.delta: not a key this sweep varies"),
        (["--where", "privacy.epsilonn=4"], "--where privacy.epsilonn: not a column"),
        (["--where", "privacy.epsilon=3"], "--where privacy.epsilon=3: no successful trial has privacy.epsilon = 3.0"),
        (["--where", "privacy.epsilon=-1"], "--where privacy.epsilon=-1"),
        (["--bins", "0"], "--bins"),
        (["--bins", "some"], "--bins"),
        (["--x", "population.users", "--bins", "8", "--hue", "privacy.epsilon"], "--bins"),
        (["--x", "population.users", "--hue", "population.users"], "--hue population.users: already an axis"),
    ],
)
def test_bad_report_arguments_exit_2(
    swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert main(["report", str(swept), "--output", str(tmp_path / "r"), *arguments]) == 2
    assert message in capsys.readouterr().err


def test_report_of_a_folder_without_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no sweep" in capsys.readouterr().err


# -- where a report may be written ----------------------------------------------------------------


def tree(folder: Path) -> dict[str, bytes]:
    """Every entry below ``folder`` (relative path -> content; a link -> where it points)."""
    entries: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            entries[str(path.relative_to(folder))] = b"-> " + str(path.readlink()).encode()
        elif path.is_file():
            entries[str(path.relative_to(folder))] = path.read_bytes()
    return entries


@pytest.fixture
def sweep_copy(swept: Path, tmp_path: Path) -> Path:
    """A private copy of the swept folder (without a report), for tests that add files to it."""
    copy = tmp_path / "sweep"
    shutil.copytree(swept, copy, ignore=shutil.ignore_patterns("report"))
    return copy


def refused(capsys: pytest.CaptureFixture[str], *fragments: str) -> None:
    error = capsys.readouterr().err
    assert error.startswith("error: --output:") and error.count("\n") == 1, error
    assert all(fragment in error for fragment in fragments), error


def test_a_report_never_replaces_a_users_file(sweep_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "u"
    mine.mkdir()
    (mine / "summary.md").write_text("NOTES", encoding="utf-8")
    assert main(["report", str(sweep_copy), "--output", str(mine)]) == 2
    refused(capsys, "was not written by fedhh")
    assert tree(mine) == {"summary.md": b"NOTES"}


def test_a_report_into_the_current_folder_is_refused(
    sweep_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "u"
    mine.mkdir()
    monkeypatch.chdir(mine)
    assert main(["report", str(sweep_copy), "--output", "."]) == 2
    refused(capsys, "is the current folder")
    assert list(mine.iterdir()) == []


def test_a_report_into_the_sweep_folder_or_a_folder_inside_it_is_refused(
    sweep_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(sweep_copy)
    assert main(["report", str(sweep_copy), "--output", str(sweep_copy)]) == 2
    refused(capsys, "is the sweep folder itself")
    for inside in ("trials", "plots"):
        assert main(["report", str(sweep_copy), "--output", str(sweep_copy / inside)]) == 2
        refused(capsys, "is inside the sweep folder")
    assert tree(sweep_copy) == before and not (sweep_copy / "plots").exists()


def test_a_users_file_in_the_report_folder_is_never_replaced(sweep_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = sweep_copy / "report"
    report.mkdir()
    (report / "summary.md").write_text("NOTES", encoding="utf-8")  # the user's own, before any report
    assert main(["report", str(sweep_copy)]) == 2
    refused(capsys, "was not written by fedhh")
    assert tree(report) == {"summary.md": b"NOTES"}
    (report / "summary.md").unlink()
    assert main(["report", str(sweep_copy)]) == 0
    (report / "notes.md").write_text("NOTES", encoding="utf-8")  # added beside fedhh's report
    before = tree(report)
    assert main(["report", str(sweep_copy)]) == 2
    refused(capsys, "files fedhh did not write ('notes.md')")
    assert tree(report) == before


def test_a_symbolic_link_in_or_as_the_report_folder_is_never_followed(
    sweep_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("NOT FEDHH'S", encoding="utf-8")
    report = sweep_copy / "report"
    assert main(["report", str(sweep_copy)]) == 0
    capsys.readouterr()
    (report / "summary.md").unlink()
    (report / "summary.md").symlink_to(outside)
    before = tree(report)
    assert main(["report", str(sweep_copy)]) == 2
    refused(capsys, "files fedhh did not write ('summary.md')")
    assert outside.read_text(encoding="utf-8") == "NOT FEDHH'S" and tree(report) == before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(elsewhere)
    assert main(["report", str(sweep_copy), "--output", str(linked)]) == 2
    refused(capsys, "is a symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_a_report_into_the_root_folder_is_refused_before_anything_is_drawn(
    sweep_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulations import sweep_report

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a report for the root folder was drawn")

    monkeypatch.setattr(sweep_report, "render", never)  # so that nothing is ever written there
    monkeypatch.setattr(sweep_report, "write_summary", never)
    assert main(["report", str(sweep_copy), "--output", "/"]) == 2
    refused(capsys, "is the root folder")


def test_rerunning_a_report_replaces_only_its_own_previous_report(
    sweep_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedhh.results import MARKER, marked_files

    assert main(["report", str(sweep_copy)]) == 0
    first = set(marked_files(sweep_copy / "report") or [])
    assert len(first) == 16 and "summary.md" in first
    assert main(["report", str(sweep_copy), "--x", "population.users", "--y", "f1", "--hue", "privacy.epsilon"]) == 0
    listed = capsys.readouterr().out.split()
    second = marked_files(sweep_copy / "report")
    assert second is not None and set(second) == {Path(path).name for path in listed[-4:]}
    assert sorted(p.name for p in (sweep_copy / "report").iterdir()) == sorted([*second, MARKER])
    assert not [p for p in sweep_copy.iterdir() if p.name.startswith(".") and p.name != MARKER]


# -- nothing pooled unless asked ------------------------------------------------------------------


def test_a_plot_that_would_pool_a_swept_key_is_refused_naming_it(
    swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep varies users and ε: a plot of users alone would mix both ε in each point."""
    output = tmp_path / "r"
    assert main(["report", str(swept), "--x", "population.users", "--y", "f1", "--output", str(output)]) == 2
    error = capsys.readouterr().err
    assert "--x population.users: the plot would pool trials of different privacy.epsilon (4, 8)" in error
    assert "--pool privacy.epsilon" in error and "--where privacy.epsilon=4)" in error and error.count("\n") == 1
    assert not output.exists()
    for axes in (["--x", "k"], ["--x", "frequency", "--hue", "privacy.epsilon"]):
        assert main(["report", str(swept), *axes, "--output", str(output)]) == 2
        assert "population.users" in capsys.readouterr().err and not output.exists()


def test_the_other_key_can_be_split_into_panels_or_pooled_by_name(swept: Path, tmp_path: Path) -> None:
    table = pq.read_table(swept / "trials.parquet").to_pylist()
    assert main(["report", str(swept), "--x", "population.users", "--y", "f1", "--col", "privacy.epsilon",
                 "--output", str(tmp_path / "cols")]) == 0
    rows = read_rows(tmp_path / "cols" / "f1-vs-population.users-per-privacy.epsilon.csv")
    assert {(float(r["privacy.epsilon"]), float(r["population.users"])): float(r["mean"]) for r in rows} == (
        pytest.approx(group_means(swept, "population.users", "f1", "privacy.epsilon")))
    figure = draw(build_plot(SweepTables(swept), PlotRequest("population.users", "f1", row="privacy.epsilon")))
    assert [axes.get_title() for axes in figure.axes if axes.get_visible()] == ["target ε = 4", "target ε = 8"]
    assert main(["report", str(swept), "--x", "k", "--row", "population.users", "--col", "privacy.epsilon",
                 "--output", str(tmp_path / "grid")]) == 0
    assert main(["report", str(swept), "--x", "population.users", "--y", "f1", "--pool", "privacy.epsilon",
                 "--output", str(tmp_path / "pooled")]) == 0
    pooled = read_rows(tmp_path / "pooled" / "f1-vs-population.users.csv")
    for row in pooled:  # each point: the four trials of its n, both ε
        values = [r["f1"] for r in table if r["population.users"] == int(row["population.users"])]
        assert float(row["mean"]) == pytest.approx(np.mean(values)) and row["trials"] == "4"
    summary = (tmp_path / "pooled" / "summary.md").read_text(encoding="utf-8")
    assert "pooled over `privacy.epsilon`" in summary


def test_where_selects_the_trials_holding_the_value(swept: Path, tmp_path: Path) -> None:
    assert main(["report", str(swept), "--where", "privacy.epsilon=8", "--x", "population.users", "--y", "f1",
                 "--output", str(tmp_path / "r")]) == 0
    rows = read_rows(tmp_path / "r" / "f1-vs-population.users.csv")
    table = pq.read_table(swept / "trials.parquet").to_pylist()
    expected = {n: np.mean([r["f1"] for r in table if r["population.users"] == n and r["privacy.epsilon"] == 8.0])
                for n in (20_000, 40_000)}
    assert {int(r["population.users"]): float(r["mean"]) for r in rows} == pytest.approx(expected)
    assert "privacy.epsilon" not in rows[0]
    summary = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert "Only the 4 successful trials with `privacy.epsilon=8`" in summary
    tables = SweepTables(swept).where(["privacy.epsilon=4", "privacy.epsilon=8.0", "population.users=20_000"])
    assert tables.count == 4 and set(tables.column("population.users")) == {20_000}
    assert set(tables.item_trial.tolist()) == {0, 1, 2, 3} and tables.item_trial.size == 4 * 50
    assert tables.swept == ["privacy.epsilon"]


def test_recall_at_any_k_is_the_share_of_the_true_top_k_found(swept: Path, tmp_path: Path) -> None:
    items = pq.read_table(swept / "items.parquet").to_pylist()
    table = pq.read_table(swept / "trials.parquet").to_pylist()
    for k in (5, 7, 50):
        assert main(["report", str(swept), "--x", "population.users", "--y", f"recall@{k}", "--hue",
                     "privacy.epsilon", "--output", str(tmp_path / str(k))]) == 0
        rows = read_rows(tmp_path / str(k) / f"recall-at-{k}-vs-population.users-by-privacy.epsilon.csv")
        per_trial = {row["trial_key"]: sum(i["discovered"] for i in items if i["trial_key"] == row["trial_key"]
                                           and i["true_rank"] <= k) / k for row in table}
        if k == 5:
            assert per_trial == {row["trial_key"]: row["recall_at_5"] for row in table}
        for row in rows:
            keys = [r["trial_key"] for r in table if (r["population.users"], r["privacy.epsilon"]) == (
                int(row["population.users"]), float(row["privacy.epsilon"]))]
            assert float(row["mean"]) == pytest.approx(np.mean([per_trial[key] for key in keys]), abs=1e-12)
            expected_model = np.mean([np.mean([i["predicted"] for i in items if i["trial_key"] == key
                                               and i["true_rank"] <= k]) for key in keys])
            assert float(row["model: TrieHH worst-case bound (Prop. 1)"]) == pytest.approx(expected_model)


def test_unbinned_frequency_plots_every_item(swept: Path, tmp_path: Path) -> None:
    assert main(["report", str(swept), "--x", "frequency", "--hue", "population.users", "--col", "privacy.epsilon",
                 "--bins", "none", "--output", str(tmp_path)]) == 0
    rows = read_rows(tmp_path / "discovery-vs-frequency-by-population.users-per-privacy.epsilon-unbinned.csv")
    items = pq.read_table(swept / "items.parquet").to_pylist()
    table = {r["trial_key"]: r for r in pq.read_table(swept / "trials.parquet").to_pylist()}
    assert len(rows) == 4 * 50  # each of the 50 tracked items, at each of the four grid points
    for row in rows[:20]:
        trials = [i for i in items if i["item"] == row["item"]
                  and table[i["trial_key"]]["population.users"] == int(row["population.users"])
                  and table[i["trial_key"]]["privacy.epsilon"] == float(row["privacy.epsilon"])]
        assert len(trials) == int(row["item_trials"]) == int(row["trials"]) == 2
        assert float(row["mean"]) == np.mean([i["discovered"] for i in trials])
        assert row["method"] == "clopper-pearson" and 0 <= float(row["low"]) <= float(row["high"]) <= 1
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "## Where discovery reaches 50% and 90%" in summary


def test_json_summary_of_a_report(swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(swept), "--x", "population.users", "--y", "f1", "--hue", "privacy.epsilon",
                 "--output", str(tmp_path / "r"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["exit_status"] == 0 and document["trials"] == 8 and document["failed_trials"] == 0
    (plot,) = document["plots"]
    assert plot["x"] == "population.users" and plot["hue"] == "privacy.epsilon" and plot["intervals"] == ["range"]
    assert plot["models"] == [] and plot["pooled"] == []
    assert sorted(document["files"]) == sorted([*plot["files"], document["summary"]])
    assert all(Path(path).is_file() for path in document["files"])


def test_legends_name_files_by_their_names() -> None:
    assert display_names(["/data/a/users.csv", "/data/b/more.csv"]) == ["users.csv", "more.csv"]
    assert display_names(["/data/a/users.csv", "/data/b/users.csv"]) == ["/data/a/users.csv", "/data/b/users.csv"]
    assert display_names([1.5, 20_000, ("pem", "olh")]) == ["1.5", "20,000", "pem / olh"]


# -- intervals a reader can trust: tables made by hand --------------------------------------------


def made_sweep(folder: Path, trials: list[dict[str, Any]], items: list[dict[str, Any]], swept: list[str]) -> Path:
    """A sweep folder written by hand: the manifest and the two tables a report reads."""
    import pyarrow as pa

    folder.mkdir()
    manifest = {"format": "fedhh-sweep/1", "sweep_file": str(folder / "made.toml"), "swept_keys": swept, "zip": [],
                "items": max((item["true_rank"] for item in items), default=1),
                "points": len({t["point"] for t in trials}),
                "trials_per_point": 1}
    (folder / "sweep.json").write_text(json.dumps(manifest), encoding="utf-8")
    config = json.dumps({"protocol": {"name": "pem"}, "population": {"words_per_user": 1}})
    base = {"error": "", "protocol": "pem", "top_k": 10, "n": 1000, "config": config, "recall_at_10": 0.5}
    pq.write_table(pa.Table.from_pylist([{**base, **trial} for trial in trials]), folder / "trials.parquet")
    schema = pa.schema([(column, pa.type_for_alias(kind)) for column, kind in ITEM_COLUMNS.items()])
    filled = [{column: item.get(column) for column in ITEM_COLUMNS} for item in items]
    pq.write_table(pa.Table.from_pylist(filled, schema=schema), folder / "items.parquet")
    return folder


def test_tied_trials_get_a_binomial_interval_of_non_zero_width(tmp_path: Path) -> None:
    """Four trials at each ε, each finding 3 of the 4 items near frequency 0.01: 12 of 16."""
    from scipy.stats import binomtest

    trials, items = [], []
    for point, epsilon in enumerate((1.0, 2.0)):
        for trial in range(4):
            key = f"{point}-{trial}"
            trials.append({"trial_key": key, "point": point, "trial": trial, "privacy.epsilon": epsilon, "f1": 0.75})
            items += [{"trial_key": key, "item": f"w{rank}", "true_rank": rank, "true_frequency": 0.01,
                       "true_count": 10, "discovered": rank != 4} for rank in (1, 2, 3, 4)]
    folder = made_sweep(tmp_path / "tied", trials, items, ["privacy.epsilon"])
    assert main(["report", str(folder), "--x", "privacy.epsilon", "--y", "discovery", "--frequency", "0.01",
                 "--output", str(tmp_path / "r")]) == 0
    rows = read_rows(tmp_path / "r" / "discovery-vs-privacy.epsilon.csv")
    exact = binomtest(12, 16).proportion_ci(0.95, method="exact")
    for row in rows:
        assert (row["found"], row["item_trials"], row["trials"], row["method"]) == ("12", "16", "4", "clopper-pearson")
        assert float(row["mean"]) == 0.75
        assert (float(row["low"]), float(row["high"])) == pytest.approx((exact.low, exact.high), abs=1e-9)
        assert float(row["high"]) - float(row["low"]) > 0.4  # 0.48 to 0.93
    assert main(["report", str(folder), "--x", "frequency", "--hue", "privacy.epsilon",
                 "--output", str(tmp_path / "f")]) == 0
    (row, _) = read_rows(tmp_path / "f" / "discovery-vs-frequency-by-privacy.epsilon.csv")
    assert (float(row["low"]), float(row["high"])) == pytest.approx((exact.low, exact.high), abs=1e-9)


def test_no_interval_leaves_0_1(tmp_path: Path) -> None:
    """Shares near 0 and near 1, over 4 trials (the range) and 12 (the bootstrap), with rates of 0 and 1."""
    trials, items = [], []
    for point, (epsilon, count) in enumerate(((1.0, 4), (2.0, 12), (4.0, 12))):
        for trial in range(count):
            key = f"{point}-{trial}"
            low = 0.3 if trial == 0 else 0.0
            trials.append({"trial_key": key, "point": point, "trial": trial, "privacy.epsilon": epsilon,
                           "f1": low if epsilon < 4 else 1.0 - low / 10, "ncr": 1.0 - low / 10, "recall_at_10": low})
            items += [{"trial_key": key, "item": f"w{rank}", "true_rank": rank, "true_frequency": 0.1 / rank,
                       "true_count": 100 // rank, "discovered": rank <= 2, "predicted": 1.0 if rank <= 2 else 0.0}
                      for rank in range(1, 11)]
    folder = made_sweep(tmp_path / "edges", trials, items, ["privacy.epsilon"])
    assert main(["report", str(folder), "--output", str(tmp_path / "r")]) == 0
    checked = 0
    for path in (tmp_path / "r").glob("*.csv"):
        for row in read_rows(path):
            assert 0 <= float(row["low"]) <= float(row["mean"]) <= float(row["high"]) <= 1, (path.name, row)
            checked += 1
    assert checked > 10
    methods = {row["privacy.epsilon"]: row["method"] for row in read_rows(tmp_path / "r" / "f1-vs-privacy.epsilon.csv")}
    assert methods == {"1.0": "range", "2.0": "bootstrap", "4.0": "bootstrap"}
    summary = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert "e-1" not in summary.replace("e-1 ", "")  # no float noise such as 0.1 ± 4.2e-17


def test_a_share_never_goes_on_a_log_axis(tmp_path: Path) -> None:
    trials = [{"trial_key": f"{p}-{t}", "point": p, "trial": t, "privacy.epsilon": epsilon, "f1": f1,
               "user_bits": bits}
              for p, (epsilon, f1, bits) in enumerate(((1.0, 0.001, 10.0), (8.0, 0.9, 2000.0))) for t in range(3)]
    folder = made_sweep(tmp_path / "log", trials, [], ["privacy.epsilon"])
    tables = SweepTables(folder)
    share = draw(build_plot(tables, PlotRequest("privacy.epsilon", "f1")))
    assert share.axes[0].get_yscale() == "linear" and share.axes[0].get_xscale() == "linear"
    bits = draw(build_plot(tables, PlotRequest("privacy.epsilon", "user_bits")))
    assert bits.axes[0].get_yscale() == "log"


# -- central and local ε: never one line --------------------------------------------------------

MODELS = {"triehh": "central, user-level, sampling+threshold", "central": "central, user-level, noisy threshold histogram",
          "pem": "local, per-user ε-LDP", "exact": "no guarantee: exact counts of every user's items, no noise"}


def privacy_sweep(folder: Path, protocols: tuple[str, ...] = ("triehh", "central", "pem", "exact")) -> Path:
    trials = [{"trial_key": f"{name}-{epsilon}", "point": p, "trial": 0, "privacy.epsilon": epsilon,
               "protocol.name": name, "protocol": name, "privacy_model": MODELS[name], "f1": 0.1 * p}
              for p, (name, epsilon) in enumerate((n, e) for n in protocols for e in (2.0, 4.0))]
    return made_sweep(folder, trials, [], ["privacy.epsilon", "protocol.name"])


def test_a_line_joining_central_and_local_epsilon_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = privacy_sweep(tmp_path / "mixed")
    assert main(["report", str(folder), "--x", "protocol.name", "--y", "f1", "--hue", "privacy.epsilon",
                 "--output", str(tmp_path / "r")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "would join trials under central ε (central, triehh" in error
    assert "and under local ε (pem" in error and "--hue protocol.name" in error
    assert not (tmp_path / "r").exists()
    # pooling protocols apart is refused too, and lines of one kind each are drawn
    assert main(["report", str(folder), "--x", "privacy.epsilon", "--y", "f1", "--pool", "protocol.name",
                 "--output", str(tmp_path / "p")]) == 2
    assert "would join trials under central ε" in capsys.readouterr().err
    only_central = privacy_sweep(tmp_path / "central", ("triehh", "central", "exact"))
    assert main(["report", str(only_central), "--x", "protocol.name", "--y", "f1", "--hue", "privacy.epsilon",
                 "--output", str(tmp_path / "c")]) == 0


def test_central_and_local_epsilon_are_labelled_apart(tmp_path: Path) -> None:
    from simulations.sweep_figures import axis_label

    folder = privacy_sweep(tmp_path / "mixed")
    assert main(["report", str(folder), "--x", "privacy.epsilon", "--y", "f1", "--hue", "protocol.name",
                 "--output", str(tmp_path / "r")]) == 0
    kinds = {row["protocol.name"]: row["privacy"] for row in read_rows(tmp_path / "r" / "f1-vs-privacy.epsilon-by-protocol.name.csv")}
    assert kinds == {"triehh": "central (user-level)", "central": "central (user-level)", "pem": "local",
                     "exact": "no privacy"}
    plot = build_plot(SweepTables(folder), PlotRequest("privacy.epsilon", "f1", hue="protocol.name"))
    assert axis_label(plot) == "target ε: central (user-level) ■ or local ●"
    figure = draw(plot)
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert "ε, central (user-level)" in legend and "ε, local" in legend and "no privacy (ε ignored)" in legend
    assert "triehh — ε central (user-level)" in legend and "pem — ε local" in legend
    markers = {line.get_label(): line.get_marker() for line in figure.axes[0].get_lines() if not line.get_label().startswith("_")}
    assert markers["triehh — ε central (user-level)"] == "s" and markers["pem — ε local"] == "o"
    assert figure.axes[0].get_xlabel() == axis_label(plot)
    local = build_plot(SweepTables(folder).where(["protocol.name=pem"]), PlotRequest("privacy.epsilon", "f1"))
    assert axis_label(local) == "target ε, local"
    summary = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert "| ε is |" in summary and "| central (user-level) |" in summary and "| local |" in summary


def test_shuffled_and_local_epsilon_are_kept_apart_and_tabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """privacy.model = "shuffle" trials state a central ε of the shuffled reports: never on one line with
    local ε, labelled apart, and every LDP trial's shuffled ε is a column of the summary table."""
    from fedhh.privacy.shuffle import MODEL as SHUFFLE_MODEL

    trials = [{"trial_key": f"{model}-{epsilon}", "point": p, "trial": 0, "privacy.epsilon": epsilon,
               "privacy.model": model, "protocol.name": "pem", "protocol": "pem",
               "privacy_model": MODELS["pem"] if model == "local" else SHUFFLE_MODEL,
               "shuffle_epsilon": 0.25 * epsilon if model == "local" else epsilon, "f1": 0.1 * p}
              for p, (model, epsilon) in enumerate((m, e) for m in ("local", "shuffle") for e in (2.0, 4.0))]
    folder = made_sweep(tmp_path / "models", trials, [], ["privacy.epsilon", "privacy.model"])
    assert main(["report", str(folder), "--x", "privacy.epsilon", "--y", "f1", "--pool", "privacy.model",
                 "--output", str(tmp_path / "p")]) == 2
    error = capsys.readouterr().err
    assert "the shuffled reports' central ε (pem" in error and "and under local ε (pem" in error
    assert "--hue privacy.model" in error
    assert main(["report", str(folder), "--x", "privacy.epsilon", "--y", "f1", "--hue", "privacy.model",
                 "--output", str(tmp_path / "r")]) == 0
    summary = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert "| ε shuffled |" in summary and "| central (shuffled reports) |" in summary and "| local |" in summary
