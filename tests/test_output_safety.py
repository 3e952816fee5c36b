"""Results folders: fedhh never deletes or overwrites what it did not write.

Every case runs the real command line on a temporary folder holding a
sentinel file that must survive untouched.  Each refusal must come before
anything runs: the run is configured with a privacy ledger, and the ledger
file must not exist afterwards (charging is the first thing a run does
once every check has passed).
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedhh.results import (
    MARKER,
    OutputError,
    OutputTakenError,
    ResultsFolder,
    marked_files,
    remove_result_folder,
    write_result,
)
from simulations import cli
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "--set", 'population.source="zipf"', "--set", "population.users=2000", "--set", "population.vocabulary=200",
    "--set", "population.item_length=3", "--set", "protocol.max_length=3", "--set", "privacy.epsilon=8",
    "--set", "privacy.delta=1e-4", "--set", 'run.driver="fast"', "--set", "run.shards=2", "--set", "run.top_k=10",
    "--quiet",
]
SENTINEL = "keep-me.txt"


def tree(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` (relative path -> content), to compare before and after."""
    return {
        str(path.relative_to(folder)): path.read_text(encoding="utf-8", errors="replace")
        for path in sorted(folder.rglob("*")) if path.is_file()
    }


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A user's folder: a sentinel file, a file, a sub-folder with a file of its own."""
    (tmp_path / SENTINEL).write_text("the user's data", encoding="utf-8")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "draft.md").write_text("# not fedhh's", encoding="utf-8")
    return tmp_path


def run_cli(args: list[str], ledger: Path) -> int:
    return main(["run", *SMALL, "--set", f'privacy.ledger="{ledger}"', *args])


@pytest.mark.parametrize(
    ("output", "cwd", "overwrite", "message"),
    [
        (".", ".", False, "is the current folder"),
        ("..", "notes", False, "is a parent of the current folder"),
        (".", ".", True, "is the current folder"),
        ("notes", ".", False, "was not written by fedhh"),
        ("notes", ".", True, "was not written by fedhh"),
        (SENTINEL, ".", False, "exists and is not a folder"),
        (SENTINEL, ".", True, "exists and is not a folder"),
        (f"{SENTINEL}/sub", ".", False, "is not a folder, so"),
        ("/proc/fedhh-results", ".", False, "cannot write in /proc"),
    ],
)
def test_a_folder_fedhh_did_not_write_is_never_touched(
    workspace: Path, output: str, cwd: str, overwrite: bool, message: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(workspace / cwd)
    before = tree(workspace)
    ledger = workspace.parent / f"{workspace.name}-ledger.json"
    status = run_cli(["--output", output, *(["--overwrite"] if overwrite else [])], ledger)
    error = capsys.readouterr().err
    assert status == 2, error
    assert message in error and error.count("\n") == 1, "one line naming --output"
    assert error.startswith("error: --output:")
    assert tree(workspace) == before, "nothing created, changed or deleted"
    assert sorted(p.name for p in workspace.iterdir()) == sorted([SENTINEL, "notes"])
    assert not ledger.exists(), "refused before the ledger is charged"


def test_the_home_folder_is_never_a_results_folder(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(workspace))
    before = tree(workspace)
    assert run_cli(["--output", str(workspace), "--overwrite"], workspace.parent / "ledger.json") == 2
    assert "is the home folder" in capsys.readouterr().err
    assert tree(workspace) == before


def test_a_previous_result_is_replaced_only_with_overwrite(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = workspace / "out"
    ledger = workspace / "ledger.json"
    assert run_cli(["--output", str(output)], ledger) == 0
    first = (output / "result.json").read_bytes()
    written = marked_files(output)
    assert written is not None and set(written) == {"result.json", "heavy_hitters.csv", "rounds.csv", "discovery.png"}

    assert run_cli(["--output", str(output), "--set", "run.seed=1"], ledger) == 2
    assert "holds a previous fedhh result; --overwrite replaces it" in capsys.readouterr().err
    assert (output / "result.json").read_bytes() == first

    assert run_cli(["--output", str(output), "--set", "run.seed=1", "--overwrite"], ledger) == 0
    assert json.loads((output / "result.json").read_text(encoding="utf-8"))["seed"] == 1
    assert marked_files(output) == written
    assert sorted(p.name for p in workspace.iterdir()) == sorted([SENTINEL, "notes", "out", "ledger.json", "ledger.json.lock"])


def test_a_previous_result_with_a_foreign_file_is_not_replaced(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = workspace / "out"
    assert run_cli(["--output", str(output)], workspace / "ledger.json") == 0
    (output / SENTINEL).write_text("added by the user", encoding="utf-8")
    before = tree(workspace)
    assert run_cli(["--output", str(output), "--overwrite"], workspace / "other-ledger.json") == 2
    assert f"files fedhh did not write ('{SENTINEL}')" in capsys.readouterr().err
    assert tree(workspace) == before


def test_an_empty_folder_is_filled_in_place(workspace: Path) -> None:
    output = workspace / "empty"
    output.mkdir()
    inode = output.stat().st_ino
    assert run_cli(["--output", str(output)], workspace / "ledger.json") == 0
    assert output.stat().st_ino == inode, "the user's folder itself is kept"
    assert (output / "result.json").is_file() and marked_files(output) is not None
    assert not [p for p in output.iterdir() if p.name.startswith(".") and p.name != MARKER]


def test_overwrite_needs_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *SMALL, "--overwrite"]) == 2
    assert "--overwrite: replaces the folder named by --output" in capsys.readouterr().err


def test_default_names_are_unique_within_one_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.time, "strftime", lambda fmt, *args: "20300101-000000")
    for seed in range(3):
        assert main(["run", *SMALL, "--set", f"run.seed={seed}"]) == 0
    names = ["triehh-20300101-000000", "triehh-20300101-000000-2", "triehh-20300101-000000-3"]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == names
    seeds = [json.loads((tmp_path / "results" / name / "result.json").read_text())["seed"] for name in names]
    assert seeds == [0, 1, 2], "no run replaced another"


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken(folder: Path) -> None:
        (folder / "part.csv").write_text("half", encoding="utf-8")
        raise RuntimeError("the plot failed")

    with pytest.raises(RuntimeError, match="the plot failed"):
        write_result(tmp_path / "new" / "deeper" / "out", {"a": 1}, [broken])
    assert list(tmp_path.iterdir()) == [], "no staging folder, lock file or parent folder left"


def test_a_crashed_run_s_staging_is_cleaned_up_and_a_foreign_one_kept(tmp_path: Path) -> None:
    crashed = tmp_path / ".out.0123abcd.fedhh-staging"
    crashed.mkdir()
    (crashed / MARKER).write_text(json.dumps({"format": "fedhh-results-folder", "state": "staging", "files": []}))
    (crashed / "result.json").write_text("{}")
    lookalike = tmp_path / ".out.4567cdef.fedhh-staging"  # same name pattern, but no fedhh marker
    lookalike.mkdir()
    (lookalike / SENTINEL).write_text("not fedhh's")
    write_result(tmp_path / "out", {"a": 1})
    assert not crashed.exists()
    assert (lookalike / SENTINEL).read_text() == "not fedhh's"


def test_removing_a_result_removes_only_what_fedhh_wrote(tmp_path: Path) -> None:
    write_result(tmp_path / "done", {"a": 1})
    remove_result_folder(tmp_path / "done")
    assert not (tmp_path / "done").exists()
    unmarked = tmp_path / "theirs"
    unmarked.mkdir()
    (unmarked / SENTINEL).write_text("keep")
    with pytest.raises(OutputError, match="not a folder fedhh wrote"):
        remove_result_folder(unmarked)
    write_result(tmp_path / "mixed", {"a": 1})
    (tmp_path / "mixed" / SENTINEL).write_text("keep")
    with pytest.raises(OutputError, match="did not write"):
        remove_result_folder(tmp_path / "mixed")
    assert (unmarked / SENTINEL).read_text() == (tmp_path / "mixed" / SENTINEL).read_text() == "keep"
    assert not (tmp_path / "mixed" / "result.json").exists()


def test_a_second_claim_of_a_path_in_use_is_refused(tmp_path: Path) -> None:
    with ResultsFolder.claim(tmp_path / "out") as first:
        with pytest.raises(OutputTakenError, match="another fedhh run is writing"):
            ResultsFolder.claim(tmp_path / "out", overwrite=True)
        assert ResultsFolder.claim_new(tmp_path / "out").path.name == "out-2"
        first.commit({"a": 1})
    assert json.loads((tmp_path / "out" / "result.json").read_text()) == {"a": 1}


# -- concurrent writers: real processes ---------------------------------------------------


def _write_concurrently(destination: str, writer: int, rounds: int, overwrite: bool, barrier: Any, outcomes: Any) -> None:
    for round_ in range(rounds):
        barrier.wait()
        folder = Path(destination) / (f"round-{round_}" if not overwrite else "out")
        try:
            write_result(folder, {"writer": writer, "round": round_}, **({"overwrite": True} if overwrite else {}))
            outcomes.put((round_, writer, "written"))
        except OutputTakenError:
            outcomes.put((round_, writer, "refused"))
        except BaseException as error:  # noqa: BLE001 - any other failure is what this test looks for
            outcomes.put((round_, writer, f"{type(error).__name__}: {error}"))


@pytest.mark.parametrize("overwrite", [False, True])
def test_four_processes_writing_one_path_never_fail_or_lose_a_result_silently(tmp_path: Path, overwrite: bool) -> None:
    writers, rounds = 4, 15
    context = multiprocessing.get_context("spawn")
    barrier, outcomes = context.Barrier(writers), context.Queue()
    processes = [
        context.Process(target=_write_concurrently, args=(str(tmp_path), w, rounds, overwrite, barrier, outcomes))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    results = [outcomes.get(timeout=120) for _ in range(writers * rounds)]
    for process in processes:
        process.join(timeout=60)
    assert {outcome for _, _, outcome in results} <= {"written", "refused"}, results
    by_round: dict[int, list[int]] = {}
    for round_, writer, outcome in results:
        if outcome == "written":
            by_round.setdefault(round_, []).append(writer)
    if not overwrite:  # exactly one writer per path; the others are told
        assert sorted(by_round) == list(range(rounds))
        for round_, winners in by_round.items():
            assert len(winners) == 1
            document = json.loads((tmp_path / f"round-{round_}" / "result.json").read_text())
            assert document == {"writer": winners[0], "round": round_}
    else:  # every write that reported success replaced the previous one whole
        assert by_round, "at least one write must succeed"
        document = json.loads((tmp_path / "out" / "result.json").read_text())
        assert document["writer"] in by_round[document["round"]]
        assert marked_files(tmp_path / "out") == ["result.json"]
    assert not [p for p in tmp_path.rglob(".*") if p.name != MARKER], "no staging, replaced or lock files left"


def test_two_runs_with_one_output_one_succeeds_the_other_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "out"
    command = [sys.executable, "-m", "simulations.cli", "run", *SMALL, "--output", str(output)]
    runs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    statuses = sorted((run.wait(timeout=120), run.stderr.read()) for run in runs if run.stderr is not None)
    assert [status for status, _ in statuses] == [0, 2], statuses
    assert "another fedhh run is writing" in statuses[1][1] or "holds a previous fedhh result" in statuses[1][1]
    assert marked_files(output) is not None


def test_library_writers_refuse_what_fedhh_did_not_write(workspace: Path) -> None:
    before = tree(workspace)
    for overwrite in (False, True):
        with pytest.raises(OutputError):
            write_result(workspace / "notes", {"a": 1}, overwrite=overwrite)
    assert tree(workspace) == before
