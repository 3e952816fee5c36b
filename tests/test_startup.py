"""Start-up cost of the ``fedhh`` command: what importing it and ``fedhh --help`` load.

Seconds are not asserted here (benchmarks/RESULTS.md records them); what would
make them regress is: importing one of the heavy packages where no command
needs it.  Each check runs in a fresh interpreter, since this test process has
imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulations.cli import COMMANDS, build_parser, named_command

# Each costs 0.2-1 s at import on the project's machines.
HEAVY = ("flwr", "ray", "scipy.stats", "matplotlib", "pandas", "pyarrow", "dp_accounting", "numba")
# ``fedhh --help`` needs only argparse: not even numpy, scipy or rich (together ~0.5 s under load).
NOT_FOR_HELP = (*HEAVY, "numpy", "scipy", "rich", "wordfreq")

LOADED = "import json, sys; print(json.dumps(sorted(m for m in {names} if m in sys.modules)))"


def loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` a fresh interpreter has imported after running ``code``."""
    script = f"{code}\n{LOADED.format(names=names)}"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_package() -> None:
    assert loaded_after("import simulations.cli", NOT_FOR_HELP) == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"], []])
def test_help_and_usage_errors_load_no_heavy_package(argv: list[str]) -> None:
    code = (
        "import contextlib, io\nfrom simulations.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass"
    )
    assert loaded_after(code, NOT_FOR_HELP) == []


def test_a_fast_run_loads_no_package_it_does_not_use(tmp_path: Path) -> None:
    """A TrieHH run on the fast driver, in-process: no Flower, Ray, scipy, tables or dp-accounting
    (no ledger), and no matplotlib either: the plot process draws."""
    argv = ["run", "--set", 'population.source="zipf"', "--set", "population.users=5000", "--set",
            "population.vocabulary=500", "--set", "population.item_length=4", "--set", "protocol.max_length=4",
            "--set", 'run.driver="fast"', "--output", str(tmp_path / "run"), "--quiet", "--json"]
    code = f"import contextlib, io\nfrom simulations.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0"
    assert loaded_after(code, (*HEAVY, "scipy")) == []
    assert (tmp_path / "run" / "discovery.png").stat().st_size > 0


def test_a_sweep_s_trials_load_no_scipy_stats(tmp_path: Path) -> None:
    """TrieHH trials with their predicted discovery (hypergeometric tails): neither scipy.stats
    nor anything else the trials do not use, in the process that runs them (``--workers 1``)."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[population]\nsource = "zipf"\nusers = 5000\nvocabulary = 500\nitem_length = 4\n'
                     '[protocol]\nmax_length = 4\n[sweep]\ntrials = 2\n"privacy.epsilon" = [2, 4]\n')
    argv = ["sweep", str(sweep), "--output", str(tmp_path / "out"), "--workers", "1", "--quiet"]
    code = f"import contextlib, io\nfrom simulations.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0"
    assert loaded_after(code, ("flwr", "ray", "scipy.stats", "matplotlib", "dp_accounting", "numba")) == []
    import pyarrow.parquet

    assert pyarrow.parquet.read_table(tmp_path / "out" / "items.parquet").column("predicted").null_count == 0


def test_help_of_the_program_lists_every_command() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    for name, command in COMMANDS.items():
        assert name in completed.stdout
        assert " ".join(command.summary.split()[:4]) in " ".join(completed.stdout.split())


def test_a_command_gets_only_its_own_arguments() -> None:
    parser = build_parser(only="plan")
    args = parser.parse_args(["plan", "triehh", "--users", "10", "--epsilon", "1", "--delta", "0.1",
                              "--max-rounds", "2"])
    assert args.users == 10 and callable(args.func)
    with pytest.raises(SystemExit):  # run's arguments were not added: its --output is unknown
        parser.parse_args(["run", "--output", "x"])
    full = build_parser()
    assert full.parse_args(["run", "--output", "x"]).output == "x"


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["run", "--set", "run.seed=1"], "run"), (["--help"], ""), ([], ""), (["audit", "ldp"], "audit"),
     (["nonsense"], "nonsense")],
)
def test_the_named_command_is_the_first_word_that_is_not_an_option(argv: list[str], command: str) -> None:
    assert named_command(argv) == command
