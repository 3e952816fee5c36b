"""What cannot run is refused before the ledger is charged; only bad input is exit status 2.

* config files that are not regular files (a folder, ``/dev/zero``, a
  FIFO) or are too large are refused without being read or waited on;
* shard counts and memory needs a machine cannot meet are refused with the
  numbers, before the privacy ledger is charged;
* an error that is not the user's input (a bug) is reported as an internal
  error with its traceback, exit status 1, never as a user error;
* ``fedhh --version``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedhh
from fedhh.config import MAX_CONFIG_BYTES, MAX_SHARDS
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "--set", 'population.source="zipf"', "--set", "population.users=2000", "--set", "population.vocabulary=200",
    "--set", "population.item_length=3", "--set", "protocol.max_length=3", "--set", "privacy.epsilon=8",
    "--set", "privacy.delta=1e-4", "--set", 'run.driver="fast"', "--set", "run.shards=2", "--quiet",
]


def fedhh_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulations.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedhh {fedhh.__version__}"


# -- config files --------------------------------------------------------------------


def test_a_folder_as_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path), "--quiet", "--output", str(tmp_path / "out")]) == 2
    assert f"config file '{tmp_path}' is a folder, not a regular file" in capsys.readouterr().err


def test_a_device_as_config_is_refused_without_reading_it() -> None:
    completed = fedhh_cli("run", "/dev/zero", timeout=30)
    assert completed.returncode == 2
    assert "config file '/dev/zero' is a character device, not a regular file" in completed.stderr


def test_a_fifo_as_config_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    completed = fedhh_cli("run", str(fifo), timeout=30)  # no writer ever opens it
    assert completed.returncode == 2
    assert "is a FIFO (named pipe), not a regular file" in completed.stderr


def test_an_oversized_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "huge.toml"
    config.write_text("[run]\nseed = 1\n" + "#" * MAX_CONFIG_BYTES + "\n", encoding="utf-8")
    assert main(["run", str(config), "--quiet", "--output", str(tmp_path / "out")]) == 2
    assert f"is larger than {MAX_CONFIG_BYTES:,} bytes" in capsys.readouterr().err


# -- what the machine cannot run, refused before the ledger is charged -----------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["run.shards=100000"], f"run.shards: got 100000; must be in 1..{MAX_SHARDS:,}"),
        (["population.users=500", "run.shards=600"], "run.shards: 600 shards for a population of 500 users"),
        (
            ["population.users=1000000000000"],
            "population.users = 1,000,000,000,000: the population (4 bytes a user",
        ),
        (
            ["population.vocabulary=100000", "population.item_length=5", "protocol.max_length=1000000"],
            "protocol.max_length = 1,000,000: encoding 100,000 items into rows of 1,000,001 symbols needs at least",
        ),
    ],
)
def test_what_cannot_run_is_refused_with_the_numbers_before_charging(
    tmp_path: Path, overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger.json"
    args = [*SMALL, "--set", f'privacy.ledger="{ledger}"', "--set", "privacy.max_epsilon=100"]
    for override in overrides:
        args += ["--set", override]
    assert main(["run", *args, "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert "memory" not in message or "more than the" in error
    assert not ledger.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["population.users=1000000000000", "privacy.delta=1e-30"],
         "population.users = 1,000,000,000,000: the population"),
        (["population.users=500", "run.shards=600"], "run.shards: 600 shards for a population of 500 users"),
        (["protocol.max_length=100000"], "cannot meet ε = 8"),
        (["population.source=\"wordfreq\"", "population.vocabulary=1000", "protocol.max_length=1000000000"],
         "protocol.max_length = 1,000,000,000: encoding 1,000 items"),
    ],
)
def test_what_a_run_refuses_before_building_is_refused_from_the_config(overrides: list[str], message: str) -> None:
    """``check_needs`` (what a sweep calls for each grid point) refuses what ``fedhh run`` refuses
    before it encodes a sampled population, from the config alone; a config that runs passes."""
    from fedhh.config import load_config
    from fedhh.errors import InputError
    from fedhh.experiment import check_needs

    settings = [SMALL[index + 1] for index in range(0, len(SMALL) - 1, 2) if SMALL[index] == "--set"]
    check_needs(load_config(None, settings))
    with pytest.raises(InputError) as refused:
        check_needs(load_config(None, [*settings, *overrides]))
    assert message in str(refused.value)


LIMITED_CLI = """
import resource, subprocess, sys
limit = int(sys.argv[1])

def limited():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

done = subprocess.run([sys.executable, "-m", "simulations.cli", *sys.argv[2:]], preexec_fn=limited,
                      capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def limited_run(tmp_path: Path, address_space: int, *settings: str) -> tuple[int, int, str]:
    """``fedhh run`` with ``settings`` under an address-space limit (``ulimit -v``): its exit status,
    its peak resident memory (bytes) and its error output."""
    args = ["run", *(part for setting in settings for part in ("--set", setting)), "--quiet",
            "--output", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-c", LIMITED_CLI, str(address_space), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    status, peak = (int(value) for value in done.stdout.split())
    return status, peak, done.stderr


def test_the_memory_check_uses_the_address_space_limit(tmp_path: Path) -> None:
    """A 1,000-word vocabulary in rows of a million symbols needs 8 GB: under ``ulimit -v`` of 2 GiB it
    is refused by that limit, with the numbers (the check once knew only the machine's memory, passed,
    and the run died of a MemoryError)."""
    status, _, error = limited_run(tmp_path, 2 << 30, "population.vocabulary=1000", "protocol.max_length=1000000")
    assert status == 2, error
    assert error.startswith("error: protocol.max_length = 1,000,000: encoding 1,000 items into rows of 1,000,001 "
                            "symbols needs at least 7.5 GiB of memory, more than the "), error
    assert "this process may have (the address-space limit (ulimit -v))" in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_impossible_privacy_target_is_refused_before_the_vocabulary_is_encoded(tmp_path: Path) -> None:
    """``protocol.max_length = 100000`` makes TrieHH's rounds L = 100,001, which ε = 4 cannot pay for
    with 10^6 users: refused as such, without first encoding 1,000 words into 800 MB of rows (the
    refusal once came after the encoding; at a million symbols the encoding was killed by the kernel)."""
    status, peak, error = limited_run(tmp_path, 3 << 30, "population.vocabulary=1000", "protocol.max_length=100000")
    assert status == 2 and error.startswith("error: cannot meet ε = 4, δ = 1e-12 with n = 1,000,000 users and "
                                            "L = 100001 rounds"), error
    assert peak < 400 << 20, f"peak resident memory {peak:,} bytes: the vocabulary was encoded"


# -- exit statuses ----------------------------------------------------------------------------


def test_an_internal_error_is_not_reported_as_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug that happens to raise ValueError: exit 1 with the traceback, and nothing written."""
    import fedhh.driving

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("an internal invariant failed")

    monkeypatch.setattr(fedhh.driving, "drive", broken)
    output = tmp_path / "out"
    assert main(["run", *SMALL, "--output", str(output)]) == 1
    error = capsys.readouterr().err
    assert "Traceback (most recent call last)" in error and "ValueError: an internal invariant failed" in error
    assert "internal error" in error and "not a problem with the input" in error
    assert not output.exists() and list(tmp_path.iterdir()) == []


def test_converted_validation_errors_stay_user_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """Checks deep in the protocol layer are user input too (exit 2), not internal errors."""
    args = ["run", *SMALL, "--set", 'protocol.name="treehist"', "--set", "protocol.sketch_width=3"]
    assert main(args) == 2
    assert "protocol.sketch_width (m): must be a power of two" in capsys.readouterr().err
