"""Populations on disk: built by ``fedhh population build``, run from with ``population.source = "dataset"``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fedhh.config import build_config
from fedhh.data.population import SingleItemShard
from fedhh.experiment import Experiment
from fedhh.results import ResultsFolder
from simulations.cli import main
from simulations.fast import run_fast
from simulations.population_build import build_population

SMALL = {"users": 30_000, "vocabulary": 3_000}


def config_of(population: dict[str, Any], protocol: str = "triehh", shards: int = 1, seed: int = 7) -> Any:
    return build_config({
        "population": population,
        "protocol": {"name": protocol},
        "run": {"driver": "fast", "backend": "inprocess", "shards": shards, "seed": seed},
    })


def build(tmp_path: Path, population: dict[str, Any], stored_shards: int, seed: int = 7, name: str = "pop") -> Path:
    folder = tmp_path / name
    with ResultsFolder.claim(folder) as output:
        build_population(config_of(population, seed=seed), output, shards=stored_shards, workers=1)
    return folder


def outcome(config: Any) -> dict[str, Any]:
    experiment = Experiment(config)
    run = run_fast(experiment, int(config["run"]["shards"]), "inprocess")
    document = experiment.finish(run.result, {}, "fast", counts=run.counts)
    # what describes the source differs (a dataset also names its vocabulary); what it holds must not
    evaluation = document["evaluation"]
    evaluation["population"] = evaluation["population"]["users_without_items"]
    return {key: document[key] for key in ("heavy_hitters", "rounds", "privacy", "evaluation")}


@pytest.mark.parametrize(
    ("population", "protocol", "stored_shards", "run_shards"),
    [
        (SMALL, "triehh", 1, 1),
        (SMALL, "triehh", 3, 4),
        ({**SMALL, "words_per_user": 3}, "triehh", 2, 3),  # several items a user: the list layout
        (SMALL, "pem", 3, 2),
    ],
)
def test_disk_and_memory_runs_are_identical(
    tmp_path: Path, population: dict[str, Any], protocol: str, stored_shards: int, run_shards: int
) -> None:
    folder = build(tmp_path, population, stored_shards)
    in_memory = outcome(config_of(population, protocol, run_shards))
    from_disk = outcome(config_of({"source": "dataset", "path": str(folder)}, protocol, run_shards))
    assert in_memory["heavy_hitters"], "the run must discover something for the comparison to mean anything"
    assert from_disk == in_memory


def test_dataset_shards_are_loaded_lazily_and_lean(tmp_path: Path) -> None:
    folder = build(tmp_path, SMALL, stored_shards=3)
    experiment = Experiment(config_of({"source": "dataset", "path": str(folder)}))
    shard = experiment.build_shard(1, 3)
    assert isinstance(shard, SingleItemShard)
    assert shard.item_of_user.dtype.itemsize == 4  # 4 bytes a user, not the CSR form's 20
    assert "item_offsets" not in shard.__dict__  # the CSR form is derived only on demand
    # the truth comes from the manifest and equals the shards' sum
    assert experiment.population_counts.users == SMALL["users"]
    summed = sum((experiment.build_shard(i, 5).counts() for i in range(1, 5)), experiment.build_shard(0, 5).counts())
    assert (summed.holders == experiment.population_counts.holders).all()


def test_built_from_a_users_own_csv_matches_the_file_source(tmp_path: Path) -> None:
    rows = ["user,item", *(f"u{u % 3000},{['apple', 'banana', 'cherry', 'date', 'fig'][u % 5 if u % 3 else 0]}"
                           for u in range(7_000))]
    csv = tmp_path / "events.csv"
    csv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    population = {"source": "file", "path": str(csv)}
    folder = build(tmp_path, population, stored_shards=2)
    manifest = json.loads((folder / "population.json").read_text())
    assert manifest["users"] == 3000 and manifest["built_from"]["population"]["path"] == str(csv)
    assert outcome(config_of({"source": "dataset", "path": str(folder)}, shards=2)) == outcome(
        config_of(population, shards=2)
    )


def test_cli_builds_in_parallel_and_runs_from_disk(tmp_path: Path) -> None:
    folder = tmp_path / "pop"
    args = ["--set", "population.users=20000", "--set", "population.vocabulary=2000", "--set", "run.seed=4"]
    assert main(["population", "build", *args, "--output", str(folder), "--shards", "3", "--workers", "2",
                 "--quiet"]) == 0
    assert sorted(path.name for path in folder.iterdir()) == [
        ".fedhh-results", "population.json", "shard-00000.parquet", "shard-00001.parquet", "shard-00002.parquet",
        "vocabulary.parquet",
    ]
    # building again over it needs --overwrite
    assert main(["population", "build", *args, "--output", str(folder), "--quiet"]) == 2
    run = ["run", "--set", "run.driver=fast", "--set", "run.seed=4", "--quiet", "--set", "population.source=dataset",
           "--set", f"population.path={folder}"]
    assert main([*run, "--output", str(tmp_path / "disk")]) == 0
    assert main(["run", *args, "--set", "run.driver=fast", "--quiet", "--output", str(tmp_path / "memory")]) == 0
    disk, memory = (json.loads((tmp_path / name / "result.json").read_text()) for name in ("disk", "memory"))
    assert disk["heavy_hitters"] == memory["heavy_hitters"] and disk["heavy_hitters"]
    assert disk["population"]["source"] == "dataset"


def test_cli_build_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "pop"
    assert main(["population", "build", "--set", "population.users=5000", "--set", "population.vocabulary=300",
                 "--output", str(folder), "--quiet", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    manifest = json.loads((folder / "population.json").read_text())
    assert (document["users"], document["items"], document["shards"]) == (
        5000, manifest["vocabulary"]["items"], len(manifest["shards"]))
    assert sorted(Path(path).name for path in document["files"]) == sorted(
        path.name for path in folder.iterdir() if path.is_file() and not path.name.startswith("."))
    assert document["bytes"] > 0 and document["exit_status"] == 0
    assert document["run_with"] == {"population.source": "dataset", "population.path": str(folder)}


def _run_from(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    status = main(["run", "--set", "run.driver=fast", "--quiet", "--set", "population.source=dataset",
                   "--set", f"population.path={path}", "--output", str(tmp_path / "out")])
    assert status == 2
    assert not (tmp_path / "out").exists()  # nothing written
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("foreign", "not written by fedhh"),
        ("results", "a fedhh results folder, not a population"),
        ("corrupt", "population.json is not valid JSON"),
        ("missing manifest", "cannot read population.json"),
        ("wrong users", "says 999 users, its shards hold 30000"),
        ("missing shard", "shard-00001.parquet is missing"),
        ("corrupt shard", "shard-00001.parquet cannot be read"),
        ("absent", "is not a folder"),
    ],
)
def test_bad_populations_are_refused_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, message: str
) -> None:
    if damage == "foreign":
        folder = tmp_path / "mine"
        folder.mkdir()
        (folder / "notes.txt").write_text("my own file\n")
    elif damage == "results":
        folder = tmp_path / "result"
        assert main(["run", "--set", "run.driver=fast", "--set", "population.users=2000", "--quiet",
                     "--output", str(folder)]) == 0
    elif damage == "absent":
        folder = tmp_path / "nowhere"
    else:
        folder = build(tmp_path, SMALL, stored_shards=2)
        manifest = folder / "population.json"
        if damage == "corrupt":
            manifest.write_text("{ not json")
        elif damage == "missing manifest":
            manifest.unlink()
        elif damage == "wrong users":
            manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "users": 999}))
        elif damage == "missing shard":
            (folder / "shard-00001.parquet").unlink()
        else:
            (folder / "shard-00001.parquet").write_bytes(b"PAR1 this is not parquet")
    error = _run_from(folder, capsys, tmp_path)
    assert "population.path" in error and message in " ".join(error.split())
    if damage == "foreign":
        assert (folder / "notes.txt").read_text() == "my own file\n"  # never touched


def test_bad_build_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    assert main(["population", "build", "--output", str(foreign), "--quiet"]) == 2
    assert "not written by fedhh" in capsys.readouterr().err and sorted(os.listdir(foreign)) == ["keep.txt"]
    assert main(["population", "build", "--set", "population.source=dataset", "--set", "population.path=x",
                 "--output", str(tmp_path / "a"), "--quiet"]) == 2
    assert "cannot be built" in capsys.readouterr().err
    assert main(["population", "build", "--set", "population.users=10", "--shards", "11",
                 "--output", str(tmp_path / "b"), "--quiet"]) == 2
    assert "--shards" in capsys.readouterr().err
    assert main(["run", "--set", "population.source=dataset", "--output", str(tmp_path / "c")]) == 2
    assert 'required when population.source = "dataset"' in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


LIMITED_RUN = textwrap.dedent("""
    import resource, sys
    from fedhh.config import build_config
    from fedhh.experiment import Experiment
    from fedhh.resources import ResourceError
    from simulations.fast import run_fast
    import pyarrow.parquet, wordfreq  # the libraries either population loads, before the limit

    source, n, checked, bytes_per_user = sys.argv[1], int(sys.argv[2]), sys.argv[4], int(sys.argv[5])
    population = {"source": "dataset", "path": sys.argv[3]} if source == "dataset" else {"users": n, "vocabulary": 20000}
    config = build_config({"population": population, "run": {"driver": "fast", "shards": 8, "seed": 3}})
    # "before": the vocabulary and the privacy solve before the limit; "after": the memory check under it
    experiment = Experiment(config) if checked == "before" else None

    def address_space():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    # bytes_per_user for each user on top of what is in use now
    limit = address_space() + n * bytes_per_user
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        run = run_fast(experiment or Experiment(config), 8, "inprocess")
    except MemoryError:
        print("out of memory")
        sys.exit(3)
    except ResourceError as error:
        print("refused:", error)
        sys.exit(4)
    # pyarrow imports pandas, where it is installed, on its first to_numpy (about 100 MB of address space)
    print("pandas imported" if "pandas" in sys.modules else "pandas not imported", len(run.result.discoveries))
""")
LIMITED_BYTES = 16  # a user's share of the limit: two thirds of the CSR form's 24 bytes (an int64 offset, id, count)


def test_one_item_a_user_runs_in_a_fraction_of_the_csr_form_from_disk_or_memory(tmp_path: Path) -> None:
    """6,000,000 users of one item each, under an address-space limit (RLIMIT_AS) of two thirds
    of what their CSR form takes: the run from disk and the run generated in memory both
    complete (each holds an int32 item id a user); the memory check counts those 4 bytes a user
    and refuses the in-memory population under half of them, naming the limit."""
    users = 6_000_000
    folder = tmp_path / "pop"
    with ResultsFolder.claim(folder) as output:
        build_population(config_of({"users": users, "vocabulary": 20_000}, seed=3), output, shards=3, workers=1)
    env = {**os.environ, "MALLOC_ARENA_MAX": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}

    def limited(source: str, checked: str, bytes_per_user: int = LIMITED_BYTES) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", LIMITED_RUN, source, str(users), str(folder), checked,
                               str(bytes_per_user)], capture_output=True, text=True, env=env, timeout=300)

    for source in ("dataset", "wordfreq"):
        for checked in ("before", "after"):  # the memory check outside and under the limit
            finished = limited(source, checked)
            assert finished.returncode == 0, (source, checked, finished.stdout[-2000:], finished.stderr[-2000:])
            assert int(finished.stdout.split()[-1]) > 100
            assert "pandas not imported" in finished.stdout  # what a run reads holds with pandas installed or not
    refused = limited("wordfreq", "after", bytes_per_user=2)
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert "population.users = 6,000,000: the population (4 bytes a user" in refused.stdout
    assert "(the address-space limit (ulimit -v))" in refused.stdout


def test_the_memory_check_counts_a_stored_shard_not_the_population(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedhh import resources

    population = {**SMALL, "vocabulary": 1_000}
    folder = build(tmp_path, population, stored_shards=3)  # 10,000 users a shard: 40 KB loaded
    # above what encoding the vocabulary holds at once (its rows, and its characters and symbols
    # while they are computed: about 290 KB for 1,000 words), below 300,000 users x 4 bytes held in memory
    monkeypatch.setattr(resources, "memory_limit", lambda: 600_000)
    with pytest.raises(resources.ResourceError, match=r"population.users = 300,000: the population \(4 bytes a user"):
        Experiment(config_of({**population, "users": 300_000}))
    assert Experiment(config_of({"source": "dataset", "path": str(folder)})).n_users == SMALL["users"]
    with pytest.raises(resources.ResourceError, match="the dataset's largest shard .200,000 users"):
        resources.require_dataset_memory(200_000)
