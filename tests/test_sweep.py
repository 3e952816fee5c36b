"""fedhh sweep: the grid, its tables, workers, resume after a real kill, and refused sweep files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fedhh.data.sources import make_source
from fedhh.experiment import Experiment
from simulations.cli import main
from simulations.deployment import descendants
from simulations.fast import run_fast
from simulations.sweep import plan_chunks
from simulations.sweep_report import write_summary
from simulations.sweep_spec import load_sweep
from simulations.sweep_tables import SweepTables
from simulations.sweep_trial import COUNT_ERRORS, RECALL_KS, TIMING_COLUMNS

TINY = """
[population]
source = "zipf"
vocabulary = 2000
item_length = 5
[protocol]
max_length = 6
[privacy]
delta = 1e-6
[run]
top_k = 20
[sweep]
trials = 2
items = 50
"population.users" = [20_000, 40_000]
"privacy.epsilon" = [4, 8]
"""
TIMING = list(TIMING_COLUMNS)
DOCUMENTED = [
    "trial_key", "point", "trial", "population.users", "privacy.epsilon", "protocol", "simulation", "seed",
    "population_seed",
    "n", "epsilon", "delta", "privacy_model", "shuffle_epsilon", "param.theta", "param.batch_size", "param.max_rounds", "top_k",
    *(f"recall_at_{k}" for k in RECALL_KS), "precision", "f1", "ncr", "discovered", "found_before_cap",
    *(f"count_{error}_{where}" for where in ("found", "top_k") for error in COUNT_ERRORS), "rounds", "stopped_because",
    *(f"predicted_recall_at_{k}" for k in RECALL_KS), "predicted_ncr", "user_bits", "user_bits_max", "server_s", "shards_s", "wall_s", "population_s", "error", "config",
]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def results(folder: Path, table: str = "trials") -> list[dict]:
    rows = pq.read_table(folder / f"{table}.parquet").to_pylist()
    for row in rows:
        for column in TIMING:
            row.pop(column, None)
    return rows


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny sweep file and its results, run once in this process (one worker)."""
    folder = tmp_path_factory.mktemp("tiny")
    sweep = write(folder, "tiny.toml", TINY)
    output = folder / "one-worker"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet", "--csv"]) == 0
    return sweep, output


def test_tiny_sweep_writes_one_documented_row_per_trial(tiny: tuple[Path, Path]) -> None:
    _, output = tiny
    table = pq.read_table(output / "trials.parquet")
    assert set(DOCUMENTED) <= set(table.column_names)
    assert all(column.startswith("param.") for column in set(table.column_names) - set(DOCUMENTED))
    rows = table.to_pylist()
    assert len(rows) == 2 * 2 * 2 and len({row["trial_key"] for row in rows}) == 8
    assert sorted((row["population.users"], row["privacy.epsilon"], row["trial"]) for row in rows) == sorted(
        (n, e, t) for n in (20_000, 40_000) for e in (4.0, 8.0) for t in (0, 1))
    for row in rows:
        assert row["error"] == "" and row["n"] == row["population.users"] and row["protocol"] == "triehh"
        assert row["epsilon"] <= row["privacy.epsilon"] and row["delta"] <= 1e-6
        assert 0 <= row["recall_at_10"] <= 1 and row["discovered"] > 0 and row["rounds"] >= 2
        assert json.loads(row["config"])["run"]["seed"] == row["seed"]
    seeds = {(row["point"], row["trial"]): row["seed"] for row in rows}
    assert len(set(seeds.values())) == 2  # the trial index, not the point, picks the seed
    items = pq.read_table(output / "items.parquet").to_pylist()
    assert len(items) == 8 * 50 and {item["trial_key"] for item in items} == {row["trial_key"] for row in rows}
    assert (output / "trials.csv").is_file() and (output / "items.csv").is_file()
    manifest = json.loads((output / "sweep.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete" and manifest["trials"] == 8 and "[sweep]" in manifest["sweep_text"]
    assert {"fedhh", "numpy"} <= set(manifest["versions"]) and manifest["machine"]["cpus"] >= 1


def test_trials_table_holds_each_runs_costs(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    """The bits a TrieHH user sends (a depth-r prefix of 5-bit symbols in each round r it is
    sampled in, over L = 7 rounds) and the server's and shards' seconds, per trial."""
    _, output = tiny
    for row in pq.read_table(output / "trials.parquet").to_pylist():
        assert row["param.max_rounds"] == 7 and row["user_bits_max"] == 5 * 28
        assert row["user_bits"] == pytest.approx(row["param.batch_size"] / row["n"] * 5 * 28)
        assert 0 < row["server_s"] < row["wall_s"] and 0 < row["shards_s"] < row["wall_s"]
    lines = write_summary(SweepTables(output), [], tmp_path).read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| population.users |"))
    assert "bits a user sends" in header and "server seconds" in header
    for column in ("ε spent", "δ", "θ", "m", "interval"):
        assert f"| {column} |" in header, column


def test_trial_metrics_equal_a_direct_run(tiny: tuple[Path, Path]) -> None:
    """A sweep row holds what fedhh's own run of that config reports (here over 3 shards)."""
    sweep, output = tiny
    trial = load_sweep(sweep).expand()[5]
    row = next(r for r in results(output) if r["trial_key"] == trial.key)
    population = make_source(trial.config["population"], Experiment(trial.config).codec, trial.population_seed)
    experiment = Experiment(trial.config, source=population)
    fast = run_fast(experiment, 3, "inprocess")
    document = experiment.finish(fast.result, fast.timing, "fast/inprocess", counts=fast.counts)
    metrics = document["evaluation"]["metrics"]
    assert row["recall_at_10"] == metrics["recall_at_k"]["10"]
    assert (row["precision"], row["f1"], row["ncr"], row["discovered"]) == (
        metrics["precision"], metrics["f1"], metrics["ncr"], metrics["discovered"])
    found = {hit["item"] for hit in document["heavy_hitters"]}
    items = [i for i in results(output, "items") if i["trial_key"] == trial.key]
    assert [i["discovered"] for i in items] == [i["item"] in found for i in items]


def test_two_workers_give_the_same_tables(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    sweep, one = tiny
    two = tmp_path / "two-workers"
    assert main(["sweep", str(sweep), "--output", str(two), "--workers", "2", "--quiet"]) == 0
    assert results(two) == results(one)
    assert results(two, "items") == results(one, "items")
    assert json.loads((two / "sweep.json").read_text())["runs"][0]["executor"] == "processes"


def test_each_population_is_built_once_per_chunk(tiny: tuple[Path, Path]) -> None:
    sweep, output = tiny
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    builders = [row for row in rows if row["population_s"] > 0]
    assert len(builders) == 2  # two population sizes, one worker: each built once
    chunks = plan_chunks(load_sweep(sweep).expand(), workers=2)
    assert sorted(len(chunk) for chunk in chunks) == [4, 4]
    assert all(len({t.population_key for t in chunk}) == 1 for chunk in chunks)
    assert len(plan_chunks([t for t in load_sweep(sweep).expand() if t.values["population.users"] == 20_000], 2)) == 2


def test_rerun_skips_finished_trials(tiny: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sweep, output = tiny
    before = {p.name: p.stat().st_mtime_ns for p in (output / "trials").iterdir()}
    assert main(["sweep", str(sweep), "--output", str(output), "--quiet"]) == 0
    assert "0 run now" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (output / "trials").iterdir()} == before


def running(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


SLOW = """
[population]
source = "zipf"
users = 300_000
vocabulary = 5000
item_length = 6
[protocol]
max_length = 6
[run]
top_k = 50
[sweep]
trials = 30
items = 100
"privacy.epsilon" = [3, 6]
"""


def test_resume_after_kill_recomputes_nothing_and_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    sweep = write(tmp_path, "slow.toml", SLOW)
    output = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "simulations.cli", "sweep", str(sweep), "--output", str(output), "--workers", "2", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list((output / "trials").glob("*.json"))) < 4 and process.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no trials"
            time.sleep(0.005)
        workers = descendants(process.pid)
        process.send_signal(signal.SIGKILL)  # the sweep process alone: its workers must follow it
        process.wait()
        assert process.returncode == -signal.SIGKILL, process.stderr.read() if process.stderr else ""
        gone_by = time.monotonic() + 10
        while any(map(running, workers)) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not [pid for pid in workers if running(pid)], "orphaned workers"
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (output / "trials").glob("*.json")}
    assert 4 <= len(kept) < 60, "the kill must land part way"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (output / "trials").glob("*.json")}
    assert all(after[name] == stamp for name, stamp in kept.items()), "finished trials were recomputed"
    last = json.loads((output / "sweep.json").read_text())["runs"][-1]
    assert (last["skipped"], last["computed"]) == (len(kept), 60 - len(kept))
    reference = tmp_path / "uninterrupted"
    assert main(["sweep", str(sweep), "--output", str(reference), "--workers", "1", "--quiet"]) == 0
    assert results(output) == results(reference)
    assert results(output, "items") == results(reference, "items")


STOP_WITHIN = 10.0  # seconds from the signal to the sweep's exit, its workers gone


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_whole_process_group_stops_the_sweep_at_once_resumably(
    tmp_path: Path, signum: int, status: int
) -> None:
    """A service manager or a shell stops the sweep and its workers together (``kill -TERM -PGID``, Ctrl-C):
    the workers die at once, mid-trial, and the sweep still ends within seconds, with the signal's exit
    status and its folder ready to resume (a stop event waited on by a killed worker once hung it)."""
    sweep = write(tmp_path, "slow.toml", SLOW)
    output = tmp_path / "stopped"
    process = subprocess.Popen(
        [sys.executable, "-m", "simulations.cli", "sweep", str(sweep), "--output", str(output), "--workers", "2", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list((output / "trials").glob("*.json"))) < 2 and process.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no trials"
            time.sleep(0.005)
        workers = descendants(process.pid)
        sent = time.monotonic()
        os.killpg(process.pid, signum)
        try:
            process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the sweep did not stop within {STOP_WITHIN:.0f} s of {signal.Signals(signum).name}")
        stopped_after = time.monotonic() - sent
        error = process.stderr.read() if process.stderr else ""
        assert process.returncode == status, error
        assert f"interrupted ({signal.Signals(signum).name})" in error and "run the same command to resume" in error
        gone_by = time.monotonic() + STOP_WITHIN
        while any(map(running, workers)) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not [pid for pid in workers if running(pid)], "orphaned workers"
        assert stopped_after < STOP_WITHIN
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kept = {p.name: p.stat().st_mtime_ns for p in (output / "trials").glob("*.json")}
    assert 2 <= len(kept) < 60, "the signal must land part way"
    assert json.loads((output / "sweep.json").read_text())["runs"][-1]["status"] == "interrupted"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    after = {p.name: p.stat().st_mtime_ns for p in (output / "trials").glob("*.json")}
    assert len(after) == 60 and all(after[name] == stamp for name, stamp in kept.items())


@pytest.mark.parametrize(
    ("case", "sweep", "message"),
    [
        ("unknown key", '"privacy.epsilonn" = [1, 2]', "privacy.epsilonn"),
        ("empty list", '"privacy.epsilon" = []', "privacy.epsilon: empty list"),
        ("bad value", '"privacy.epsilon" = [1, -2]', "privacy.epsilon"),
        ("bad grid point", '"population.source" = ["zipf", "file"]\n"privacy.epsilon" = [1, 2]',
         "sweep point 3 of 4 (population.source = 'file', privacy.epsilon = 1.0): population.path"),
        ("zip lengths", '[sweep.zip]\n"privacy.epsilon" = [1, 2]\n"privacy.delta" = [1e-6]', "one length"),
        ("transport key", '"run.shards" = [1, 2]', "run.shards cannot be swept"),
        ("not a list", '"privacy.epsilon" = 4', "expected a list"),
        ("trials", "trials = 0", "sweep.trials"),
    ],
)
def test_bad_sweep_file_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, sweep: str, message: str
) -> None:
    path = write(tmp_path, "bad.toml", f"[sweep]\n{sweep}\n")
    output = tmp_path / "never"
    assert main(["sweep", str(path), "--output", str(output), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not output.exists()


def test_foreign_folder_is_refused(tiny: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep, output = tiny
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["sweep", str(sweep), "--output", str(foreign), "--quiet"]) == 2
    assert "no sweep manifest" in capsys.readouterr().err
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    other = write(tmp_path, "other.toml", TINY)
    assert main(["sweep", str(other), "--output", str(output), "--quiet"]) == 2
    assert "holds a sweep of" in capsys.readouterr().err


def test_a_failing_trial_is_recorded_and_the_sweep_goes_on_then_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write(tmp_path, "refused.toml", TINY.replace("[20_000, 40_000]", "[30, 20_000]"))
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 3
    error = capsys.readouterr().err
    assert f"4 of 8 trials failed: their errors are in the error column of {output}/trials.parquet" in error
    assert "the most common, 2 time(s): PrivacyTargetError: cannot meet" in error
    assert main(["sweep", str(sweep), "--output", str(output), "--quiet"]) == 3, "the tables still hold failures"
    assert "0 run now" in capsys.readouterr().err
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    failed = [row for row in rows if row["error"]]
    assert len(rows) == 8 and {row["population.users"] for row in failed} == {30}
    assert all("PrivacyTargetError" in row["error"] and row["recall_at_10"] is None for row in failed)
    assert all(row["recall_at_10"] is not None for row in rows if not row["error"])


def test_ray_tasks_give_the_same_tables(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    import ray

    from simulations.sweep import run_sweep

    sweep, one = tiny
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                       logging_level="ERROR")
    try:
        outcome = run_sweep(load_sweep(sweep), tmp_path / "ray", ray_address=context.address_info["address"],
                            show_progress=False)
    finally:
        ray.shutdown()
    assert outcome.status == "complete" and outcome.computed == 8
    assert results(tmp_path / "ray") == results(one)
    assert results(tmp_path / "ray", "items") == results(one, "items")
    assert np.isfinite([row["recall_at_10"] for row in results(one)]).all()


def test_sigterm_stops_a_sweep_on_a_ray_cluster_like_ctrl_c(tmp_path: Path) -> None:
    """``ray.init`` installs a SIGTERM handler of its own (an exit with status 15, none of the sweep's
    clean-up); the sweep keeps fedhh's, so one SIGTERM stops it as Ctrl-C does: status 143, the folder
    ready to resume."""
    import ray

    sweep = write(tmp_path, "slow.toml", SLOW)
    output = tmp_path / "stopped"
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                       logging_level="ERROR")
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "simulations.cli", "sweep", str(sweep), "--output", str(output),
             "--ray-address", context.address_info["address"], "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while len(list((output / "trials").glob("*.json"))) < 2 and process.poll() is None:
                assert time.monotonic() < deadline, "the sweep wrote no trials"
                time.sleep(0.01)
            process.send_signal(signal.SIGTERM)
            _, error = process.communicate(timeout=STOP_WITHIN)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    finally:
        ray.shutdown()
    assert process.returncode == 143, error
    assert "interrupted (SIGTERM)" in error and "run the same command to resume" in error
    assert json.loads((output / "sweep.json").read_text())["runs"][-1]["status"] == "interrupted"


def test_a_resized_population_equals_a_fresh_one(tiny: tuple[Path, Path]) -> None:
    """The second population size reuses the first one's encoded vocabulary, and draws the same users."""
    from simulations.sweep_trial import PopulationCache

    sweep, _ = tiny
    trials = load_sweep(sweep).expand()
    small, large = (next(t for t in trials if t.values["population.users"] == n) for n in (20_000, 40_000))
    cache = PopulationCache()
    first, _ = cache.get(small)
    second, seconds = cache.get(large)
    assert seconds > 0 and second.source.vocabulary is first.source.vocabulary
    fresh = make_source(large.config["population"], Experiment(large.config).codec, large.population_seed).build_all()
    assert second.source.n_users == fresh.n_users == 40_000
    for field in ("item_offsets", "item_ids", "item_counts"):
        assert np.array_equal(getattr(second.shard, field), getattr(fresh, field))
    assert np.array_equal(second.shard.vocabulary.rows, fresh.vocabulary.rows)


# -- a sweep as a job: one at a time, bounded, checked, resumable after a full disk -----------------


def test_a_second_sweep_of_a_folder_in_use_is_refused_naming_the_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write(tmp_path, "slow.toml", SLOW)
    output = tmp_path / "busy"
    first = subprocess.Popen(
        [sys.executable, "-m", "simulations.cli", "sweep", str(sweep), "--output", str(output), "--workers", "1",
         "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((output / "trials").glob("*.json")) and first.poll() is None:
            assert time.monotonic() < deadline, "the first sweep wrote no trial"
            time.sleep(0.01)
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        before = {p.name for p in (output / "trials").glob("[0-9a-f]*.json")}
        assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 2
        error = capsys.readouterr().err
        assert f"another fedhh run is writing {output} (process {first.pid} holds it)" in error, error
        assert error.count("\n") == 1
        assert before <= {p.name for p in (output / "trials").glob("[0-9a-f]*.json")}, "the second sweep removed nothing"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet", "--max-trials", "60"]) == 0
    manifest = json.loads((output / "sweep.json").read_text())
    assert manifest["status"] == "complete" and manifest["rows"] == 60


def test_a_sweep_of_a_trillion_trials_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "trials": ("[sweep]\ntrials = 1_000_000_000_000\n", [], "1 grid points x 1,000,000,000,000 trials per point"),
        "grid": ("[sweep]\n" + "".join(f'"{key}" = [{", ".join(str(v) for v in values)}]\n' for key, values in (
            ("population.users", range(1000, 1100)), ("privacy.epsilon", range(1, 101)), ("run.seed", range(100)))),
            [], "1,000,000 grid points x 1 trials per point"),
        # one axis of 100,000 values: allowed by the cap asked for, checked for repeats in linear time
        "axis": ("[sweep]\ntrials = 10\n\"run.seed\" = [" + ", ".join(map(str, range(100_000))) + "]\n",
                 ["--max-trials", "200000"], "= 1,000,000 trials, more than the 200,000 a sweep may run"),
        "long axis": ("[sweep]\n\"run.seed\" = [" + ", ".join(map(str, range(5000))) + "]\n",
                      ["--max-trials", "1000"], "run.seed: 5,000 values, more than the 1,000"),
    }
    for name, (text, extra, message) in cases.items():
        path = write(tmp_path, f"{name.replace(' ', '-')}.toml", text)
        started = time.perf_counter()
        assert main(["sweep", str(path), "--output", str(tmp_path / "never"), "--quiet", *extra]) == 2, name
        seconds = time.perf_counter() - started
        error = capsys.readouterr().err
        assert seconds < 5, f"{name}: refused after {seconds:.1f} s"
        assert message in error and "--max-trials N raises the cap" in error and error.count("\n") == 1, error
        assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("case", "text", "message"),
    [
        ("base is a device", 'base = "/dev/zero"\n[sweep]\n"privacy.epsilon" = [1, 2]',
         "base '/dev/zero' is a character device, not a regular file"),
        ("10^12 users", '[sweep]\n"population.users" = [10_000, 1_000_000_000_000]',
         "sweep point 2 of 2 (population.users = 1000000000000): population.users = 1,000,000,000,000: the "
         "population"),
        ("encoding beyond memory", '[population]\nvocabulary = 1000\n[sweep]\n"protocol.max_length" = [10, 100_000_000]',
         "sweep point 2 of 2 (protocol.max_length = 100000000): protocol.max_length = 100,000,000: encoding 1,000 "
         "items into rows of 100,000,001 symbols needs at least"),
        ("delta not below 1/n", '[privacy]\ndelta = 0.01\n[sweep]\n"population.users" = [50, 20_000]',
         "sweep point 2 of 2 (population.users = 20000): privacy.delta: δ = 0.01 is not below 1/n"),
        ("missing files", '[population]\nsource = "file"\npath = "gone.csv"\n[sweep]\n'
         '"population.path" = ["gone-1.csv", "gone-2.csv"]',
         "sweep point 1 of 2 (population.path = 'gone-1.csv'): population.path: 'gone-1.csv' does not exist"),
        ("a device as population", '[population]\nsource = "file"\npath = "/dev/zero"\n[sweep]\n'
         '"privacy.epsilon" = [1, 2]', "population.path: '/dev/zero' is a character device, not a regular file"),
        ("a missing dataset", '[population]\nsource = "dataset"\npath = "no-such-population"\n[sweep]\n'
         '"privacy.epsilon" = [1, 2]', "population.path: 'no-such-population' does not exist"),
    ],
)
def test_each_grid_point_passes_the_checks_of_run_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str, text: str,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "points.toml", text)
    assert main(["sweep", str(path), "--output", str(tmp_path / "never"), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert not (tmp_path / "never").exists()


def test_a_sweep_stopped_by_a_full_disk_keeps_its_trials_and_resumes(
    tiny: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills after three trials: the write that fails leaves no partial file, the sweep
    stops with exit status 1 and a one-line reason, and the same command then finishes it."""
    import errno

    from fedhh import results as folders

    sweep, reference = tiny
    output = tmp_path / "full"
    replacing = folders.write_replacing
    written: list[str] = []

    def full_disk(path: Path, write: folders.FileWriter) -> None:
        if path.parent.name == "trials" and len(written) >= 3 or written and path.suffix == ".parquet":
            def half(handle: object) -> None:
                handle.write(b"{")  # type: ignore[attr-defined]
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            replacing(path, half)
        replacing(path, write)
        if path.parent.name == "trials":
            written.append(path.name)

    monkeypatch.setattr(folders, "write_replacing", full_disk)
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 1
    error = capsys.readouterr().err
    assert f"stopped: cannot write in {output} (No space left on device)" in error
    assert "run the same command to resume" in error and "Traceback" not in error
    kept = {p.name: p.stat().st_mtime_ns for p in (output / "trials").iterdir()}
    assert sorted(kept) == sorted(written) and len(kept) == 3, "whole trial files only"
    assert not [p for p in output.rglob(".*") if p.name != ".fedhh-results"], "no partial file left"
    monkeypatch.setattr(folders, "write_replacing", replacing)  # space freed
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    assert all((output / "trials" / name).stat().st_mtime_ns == stamp for name, stamp in kept.items())
    assert json.loads((output / "sweep.json").read_text())["runs"][-1]["computed"] == 5
    assert results(output) == results(reference)


def test_summary_lists_each_points_privacy_without_float_noise(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    """ε spent, δ, θ and m of each grid point, as the trials' table holds them, in a few digits."""
    _, output = tiny
    rows = pq.read_table(output / "trials.parquet").to_pylist()
    lines = write_summary(SweepTables(output), [], tmp_path).read_text(encoding="utf-8").splitlines()
    header = next(line for line in lines if line.startswith("| population.users |")).split(" | ")
    table = [line.split(" | ") for line in lines if line.startswith("| 20,000 |") or line.startswith("| 40,000 |")]
    assert len(table) == 4
    for cells in table:
        point = next(r for r in rows if f"{r['population.users']:,}" == cells[0].strip("| ")
                     and f"{r['privacy.epsilon']:g}" == cells[1])
        cell = dict(zip(header, cells))
        assert cell["θ"] == str(point["param.theta"]) and cell["m"] == f"{point['param.batch_size']:,}"
        assert float(cell["ε spent"]) == pytest.approx(point["epsilon"], rel=5e-3)
        assert float(cell["δ"]) == pytest.approx(point["delta"], rel=5e-3)
        assert cell["interval"] == "range"  # two trials: no interval, their range
    text = "\n".join(lines)
    assert not re.search(r"e-1[0-9]", text.replace(f"{rows[0]['delta']:.3g}", "")), "float noise"


REDRAWN = TINY.replace("trials = 2", "trials = 3\nredraw_population = true")


def test_redraw_population_gives_each_trial_its_own_population_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write(tmp_path, "redrawn.toml", REDRAWN)
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    rows = results(output)
    assert len(rows) == 12 and all(row["population_seed"] == row["seed"] for row in rows)
    items = results(output, "items")
    for point in range(4):
        keys = [row["trial_key"] for row in rows if row["point"] == point]
        counts = [tuple((i["item"], i["true_count"]) for i in items if i["trial_key"] == key) for key in keys]
        assert len(set(counts)) == 3, "each trial of a point draws its own population"
    trial = load_sweep(sweep).expand()[4]  # a trial is `fedhh run` with its seed: the same population
    fresh = make_source(trial.config["population"], Experiment(trial.config).codec, trial.seed)
    drawn = {i["item"]: i["true_count"] for i in items if i["trial_key"] == trial.key}
    truth = Experiment(trial.config, source=fresh).truth(fresh.build_all().counts())
    assert drawn == {truth.items[i]: int(truth.holders[i]) for i in truth.order[: len(drawn)].tolist()}
    assert json.loads((output / "sweep.json").read_text())["redraw_population"] is True
    assert main(["sweep", str(sweep), "--output", str(output), "--quiet"]) == 0
    assert "0 run now" in capsys.readouterr().err
    write(tmp_path, "redrawn.toml", REDRAWN.replace("redraw_population = true", "redraw_population = false"))
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    assert "12 run now" in capsys.readouterr().err, "the flag is part of each trial's key"
    shared = results(output)
    assert {row["population_seed"] for row in shared} == {load_sweep(sweep).base["run"]["seed"]}
    assert json.loads((output / "sweep.json").read_text())["redraw_population"] is False
    write(tmp_path, "redrawn.toml", REDRAWN)
    assert main(["sweep", str(sweep), "--output", str(output), "--quiet"]) == 0
    assert "0 run now" in capsys.readouterr().err
    assert results(output) == rows


def test_shared_population_trials_keep_their_keys(tiny: tuple[Path, Path]) -> None:
    """Without redraw_population the trial keys are those of sweeps written before the flag existed."""
    sweep, _ = tiny
    trials = load_sweep(sweep).expand()
    assert trials[0].key == "c4deba209788e83fd8dc" and trials[0].population_seed == trials[1].population_seed


def test_bad_redraw_population_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write(tmp_path, "bad.toml", TINY.replace("trials = 2", "trials = 2\nredraw_population = 1"))
    assert main(["sweep", str(sweep), "--output", str(tmp_path / "never"), "--quiet"]) == 2
    assert "sweep.redraw_population: expected true or false, got 1" in capsys.readouterr().err


def test_json_summary_of_a_sweep(tiny: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sweep, output = tiny
    assert main(["sweep", str(sweep), "--output", str(output), "--quiet", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["exit_status"] == 0 and document["exit_meaning"] == "every trial of the grid ran without error"
    assert document["trials"] == {"total": 8, "run_now": 0, "failed_now": 0, "done_before": 8, "not_run": 0,
                                  "failed_in_tables": 0}
    assert document["tables"]["trials"] == str(output / "trials.parquet") and document["rows"] == 8
    assert document["status"] == "complete" and document["errors"] == []


def test_an_extended_grid_reuses_its_trials_in_their_new_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new axis whose first value is the base's: the trials already run are reused, and the tables
    give them their new point and the new axis' value (not an empty cell)."""
    small = TINY.replace('"population.users" = [20_000, 40_000]\n', "").replace("[population]\n",
                                                                              "[population]\nusers = 20_000\n")
    sweep = write(tmp_path, "grown.toml", small)
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    before = {row["trial_key"]: row for row in results(output)}
    write(tmp_path, "grown.toml", small.replace('"privacy.epsilon" = [4, 8]',
                                                '"privacy.epsilon" = [4, 8]\n"population.users" = [20_000, 40_000]'))
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1", "--quiet"]) == 0
    assert "4 run now" in capsys.readouterr().err
    rows = results(output)
    assert len(rows) == 8 and all(row["population.users"] in (20_000, 40_000) for row in rows)
    for row in rows:
        expected_point = [4.0, 8.0].index(row["privacy.epsilon"]) * 2 + [20_000, 40_000].index(row["population.users"])
        assert row["point"] == expected_point
        if row["trial_key"] in before:
            assert row["population.users"] == 20_000 and row["f1"] == before[row["trial_key"]]["f1"]
    assert json.loads((output / "sweep.json").read_text())["swept_keys"] == ["privacy.epsilon", "population.users"]
