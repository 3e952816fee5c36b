"""fedhh report: plot files, the plotted numbers against the tables, the analytic curves, bad arguments."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from simulations.analytic import triehh_rate
from simulations.cli import main
from simulations.sweep_report import SweepTables, build_plot, draw, plan_plots

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
    plotted = {(float(r[1]), float(r[2])): float(r[3]) for r in read_csv(tmp_path / "f1-vs-population.users-by-privacy.epsilon.csv")}
    assert plotted == pytest.approx(expected, abs=1e-12) and len(plotted) == 4
    plot = build_plot(SweepTables(swept), "population.users", "f1", "privacy.epsilon", None)
    figure = draw(plot)
    drawn = [line for line in figure.axes[0].lines if not line.get_label().startswith("_")]
    assert len(drawn) == 2
    for line, curve in zip(drawn, plot.curves):
        assert list(line.get_xdata()) == [20_000.0, 40_000.0]
        assert list(line.get_ydata()) == pytest.approx([expected[(curve.hue, n)] for n in (20_000, 40_000)])


def test_recall_against_k_agrees_with_the_recall_columns(swept: Path) -> None:
    """The per-item table and the per-trial table tell the same story."""
    plot = build_plot(SweepTables(swept), "k", "recall", "population.users", "privacy.epsilon")
    for curve in plot.curves:
        for k in (1, 5, 10, 25, 50):
            expected = group_means(swept, "privacy.epsilon", f"recall_at_{k}", "population.users")
            assert curve.mean[k - 1] == pytest.approx(expected[(curve.hue, curve.facet)], abs=1e-12)


def test_triehh_bound_is_drawn_at_the_runs_parameters(swept: Path) -> None:
    tables = SweepTables(swept)
    plot = build_plot(tables, "frequency", "discovery", "population.users", "privacy.epsilon")
    assert "Prop. 1" in plot.model_label and len(plot.curves) == 4
    rows = pq.read_table(swept / "trials.parquet").to_pylist()
    for curve in plot.curves:
        row = next(r for r in rows if (r["population.users"], r["privacy.epsilon"]) == (curve.hue, curve.facet))
        assert curve.model_y == pytest.approx(triehh_rate(
            curve.model_x, row["n"], row["param.batch_size"], row["param.theta"], row["param.max_rounds"]))
        assert np.all(np.diff(curve.model_y) >= -1e-12)  # more holders, more often found
        assert curve.model_y[0] < 0.05 and curve.model_y[-1] > 0.95
    dense = build_plot(tables, "population.users", "discovery", "privacy.epsilon", None, frequency=0.01)
    assert dense.model_label.startswith("TrieHH worst-case bound at frequency 0.01")
    assert all(curve.model_x is not None and curve.model_x.size > 2 for curve in dense.curves)


def test_pem_prediction_sits_beside_its_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "pem.toml"
    sweep.write_text(PEM, encoding="utf-8")
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    pem = [row for row in rows if row["protocol"] == "pem"]
    assert pem and all(0 <= row["predicted_ncr"] <= 1 for row in pem)
    assert all(row["predicted_ncr"] is None for row in rows if row["protocol"] == "treehist")
    items = pq.read_table(output / "items.parquet").to_pylist()
    predicted = [item["predicted"] for item in items if item["trial_key"] == pem[0]["trial_key"]]
    assert all(0 <= p <= 1 for p in predicted[:8]) and predicted[8:] == [0.0] * (len(predicted) - 8)
    tables = SweepTables(output)
    axis = "protocol.name,protocol.oracle"  # a zipped group is one axis
    assert tables.swept == [axis] and plan_plots(tables, None, "ncr", None, None) == [(axis, "ncr", None, None)]
    plot = build_plot(tables, axis, "ncr", None, None)
    assert plot.model_label == "PEM analysis (order-statistics model)"
    assert list(plot.curves[0].x) == [("pem", "olh"), ("treehist", "flh")]
    assert plot.curves[0].model_y[0] == pytest.approx(np.mean([row["predicted_ncr"] for row in pem]))
    assert np.isnan(plot.curves[0].model_y[1])
    assert main(["report", str(output), "--x", axis, "--y", "ncr"]) == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--x", "population.user"], "--x population.user"),
        (["--y", "recall_at_7"], "--y recall_at_7"),
        (["--x", "k", "--y", "f1"], "--y f1"),
        (["--hue", "privacy.epsilonn"], "--hue privacy.epsilonn"),
        (["--frequency", "2"], "--frequency"),
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
    assert main(["report", str(sweep_copy), "--x", "population.users", "--y", "f1"]) == 0
    listed = capsys.readouterr().out.split()
    second = marked_files(sweep_copy / "report")
    assert second is not None and set(second) == {Path(path).name for path in listed[-4:]}
    assert sorted(p.name for p in (sweep_copy / "report").iterdir()) == sorted([*second, MARKER])
    assert not [p for p in sweep_copy.iterdir() if p.name.startswith(".") and p.name != MARKER]
