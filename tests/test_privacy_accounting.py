"""Privacy accounting: Theorem 1's conditions, reports, LDP splits, composition
with dp-accounting, the ledger (budget, atomic writes, locking) and plans.

The reference example, round trips and basic refusals of the TrieHH solver
are in ``test_privacy_triehh.py``; this file adds what the accountant needs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dp_accounting.pld import accountant, common
from dp_accounting.pld import privacy_loss_distribution as pld_module

from fedhh.privacy import ledger as ledger_module
from fedhh.privacy.composition import advanced_composition, compose
from fedhh.privacy.ldp import BudgetRule, ldp_report
from fedhh.privacy.ledger import BudgetExceededError, Ledger, LedgerError
from fedhh.privacy.report import PrivacyReport
from fedhh.privacy.triehh import TrieHHParameters, solve_triehh
from fedhh.protocols import PROTOCOLS, plan, register_protocol, split_budget
from fedhh.protocols.triehh.plan import markdown_table, triehh_table

REPO = Path(__file__).resolve().parents[1]


def reference_report() -> PrivacyReport:
    return solve_triehh(1_000_000, 4.0, 1e-12, 10).report()


# Theorem 1's conditions ---------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.5, 4.0, 20.0, 60.0])
@pytest.mark.parametrize("rounds", [2, 5, 10])
def test_solved_parameters_meet_every_condition_of_the_theorem(epsilon: float, rounds: int) -> None:
    """Large per-round budgets make the θ >= e^(ε/L) - 1 floor bind: γ(θ + 1) <= 1 must still hold."""
    params = solve_triehh(10_000_000, epsilon, 1e-9, rounds)
    assert params.theorem_violations() == []
    assert params.sampling_rate * (params.theta + 1) <= 1
    assert params.report().has_guarantee and params.epsilon <= epsilon


def authors_rule(n_users: int, epsilon: float, delta: float, rounds: int) -> tuple[int, int]:
    """θ and m exactly as REFERENCE.md states the authors' code chooses them."""
    theta = 4
    while (theta - 3) / (theta - 2) * math.factorial(theta) < 1 / delta:
        theta += 1
    while theta < math.exp(epsilon / rounds) - 1:
        theta += 1
    growth = math.exp(epsilon / rounds)
    return theta, math.floor(n_users * (growth - 1) / (theta * growth))


@pytest.mark.parametrize(("epsilon", "rounds"), [(1.0, 10), (4.0, 10), (8.0, 5), (13.0, 5)])
def test_solver_is_the_authors_rule_until_their_theta_floor_binds(epsilon: float, rounds: int) -> None:
    n_users, delta = 10_000_000, 1e-9
    params = solve_triehh(n_users, epsilon, delta, rounds)
    assert (params.theta, params.batch_size) == authors_rule(n_users, epsilon, delta, rounds)


def test_large_per_round_budgets_keep_theta_and_stop_at_the_sampling_limit() -> None:
    """ε/L = 10: the authors' θ would be e^10 - 1 = 22,026, so their m (~ n/θ) falls below θ
    for ten million users; the solver keeps θ = 13 and samples n/(θ + 1), spending less than ε."""
    n_users, epsilon, delta, rounds = 10_000_000, 20.0, 1e-9, 2
    theta, batch = authors_rule(n_users, epsilon, delta, rounds)
    assert theta == 22_026 and batch < theta  # the authors' rule cannot run here
    params = solve_triehh(n_users, epsilon, delta, rounds)
    assert params.theta == 13 and params.batch_size == n_users // 14
    assert params.theorem_violations() == [] and params.epsilon == pytest.approx(rounds * math.log(14), rel=1e-4)
    assert params.epsilon < epsilon


def test_parameters_above_the_sampling_limit_report_no_guarantee() -> None:
    """θγ = 0.88 < 1 gives a finite formula, but γ(θ + 1) = 1.1 > 1 is outside the theorem."""
    params = TrieHHParameters(n_users=1000, max_rounds=5, theta=4, batch_size=220)
    report = params.report()
    assert any("γ·(θ + 1)" in problem for problem in params.theorem_violations())
    assert report.model.startswith("no guarantee") and not report.has_guarantee
    assert (report.epsilon, report.delta) == (math.inf, 1.0)
    inside = TrieHHParameters(n_users=1000, max_rounds=5, theta=4, batch_size=200)  # γ(θ + 1) = 1
    assert inside.theorem_violations() == [] and inside.report().has_guarantee


# reports --------------------------------------------------------------------------
def test_report_dict_keeps_its_shape_and_round_trips_through_json() -> None:
    report = reference_report()
    data = report.to_dict()
    assert set(data) == {"model", "epsilon", "delta", "mechanism", "method", "adjacency", "parameters", "coverage"}
    assert PrivacyReport.from_dict(json.loads(json.dumps(data))) == report
    combined = report.with_composition(compose([(report.epsilon, report.delta)] * 3))
    again = PrivacyReport.from_dict(json.loads(json.dumps(combined.to_dict())))
    assert again == combined and again.composition.runs == 3
    assert "cumulative over 3 run(s)" in combined.summary()


def test_no_guarantee_reports_survive_json_with_infinity_as_a_string() -> None:
    report = TrieHHParameters(100, 5, 3, 100).report()
    data = json.loads(json.dumps({**report.to_dict(), "epsilon": "inf"}))
    assert PrivacyReport.from_dict(data).epsilon == math.inf


# LDP ------------------------------------------------------------------------------
def sfp_rule(fragment_share: float) -> BudgetRule:
    """SFP's split (Apple 2017; [Cormode21]): the fragment with the word's hash, then the whole word."""
    return BudgetRule((("fragment with the word's hash", fragment_share), ("full word", 1 - fragment_share)), "SFP")


@pytest.mark.parametrize(
    ("split", "parts"),
    [
        (lambda: split_budget("pem", 4.0), [4.0]),
        (lambda: split_budget("treehist", 4.0), [2.0, 2.0]),
        (lambda: sfp_rule(0.5).split("sfp", 4.0), [2.0, 2.0]),
        (lambda: sfp_rule(0.25).split("sfp", 4.0), [1.0, 3.0]),
    ],
)
def test_ldp_reports_add_up_the_user_s_reports(split, parts: list[float]) -> None:  # noqa: ANN001
    split = split()
    assert [epsilon for _, epsilon in split.parts] == pytest.approx(parts)
    report = ldp_report(split, "olh", {"groups": 3})
    assert (report.epsilon, report.delta) == (pytest.approx(4.0), 0.0)
    assert report.model == "local, per-user ε-LDP" and report.has_guarantee
    assert report.parameters["oracle"] == "olh" and report.parameters["groups"] == 3
    assert sum(report.parameters["split"].values()) == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # a name with no split; the protocols imported so far add theirs to the allowed list
        (lambda: split_budget("nope", 1.0), r"protocol.name: no LDP budget split for 'nope'; allowed: \[.*'pem'.*'treehist'.*\]"),
        (lambda: sfp_rule(1.0), "budget shares"),
        (lambda: split_budget("pem", 0.0), "privacy.epsilon"),
    ],
)
def test_ldp_splits_refuse_bad_input(call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        call()


# composition ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("epsilon", "delta", "runs", "total_delta"),
    [(4.0, 1e-12, 30, 1e-9), (0.1, 1e-7, 200, 1e-4), (0.5, 0.0, 50, 1e-6), (1.0, 1e-6, 10, None)],
)
def test_k_identical_runs_match_dp_accounting_and_never_exceed_basic(
    epsilon: float, delta: float, runs: int, total_delta: float | None
) -> None:
    summary = compose([(epsilon, delta)] * runs, total_delta)
    target = 2 * runs * delta if total_delta is None else total_delta
    pld = pld_module.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon, delta), summary.discretization
    ).self_compose(runs)
    assert summary.delta == pytest.approx(target)
    assert summary.pld_epsilon == pytest.approx(pld.get_epsilon_for_delta(target), abs=1e-9)
    assert summary.epsilon <= runs * epsilon
    # Pessimistic rounding costs at most one grid step per run.
    assert summary.pld_epsilon <= runs * epsilon + runs * summary.discretization
    assert summary.basic_epsilon == pytest.approx(runs * epsilon)
    assert summary.basic_delta == pytest.approx(runs * delta)


def test_pld_matches_the_optimal_composition_theorem() -> None:
    """Kairouz-Oh-Viswanath's exact homogeneous composition, as dp-accounting states it,
    can only be looser than the PLD (it answers on a grid of ε(k - 2i))."""
    for epsilon, delta, runs, target in [(0.5, 1e-6, 20, 1e-4), (0.2, 0.0, 40, 1e-6), (0.1, 1e-7, 100, 1e-5)]:
        summary = compose([(epsilon, delta)] * runs, target)
        theorem = accountant.advanced_composition(common.DifferentialPrivacyParameters(epsilon, delta), runs, target)
        assert theorem - 2 * epsilon - 1e-6 <= summary.pld_epsilon <= theorem + runs * summary.discretization
        assert summary.pld_epsilon < summary.basic_epsilon


def test_advanced_composition_is_dwork_rothblum_vadhan_with_the_whole_slack() -> None:
    epsilon, delta = advanced_composition([(0.1, 0.0)] * 100, 1e-6)
    assert delta == 1e-6
    assert epsilon == pytest.approx(math.sqrt(2 * math.log(1e6) * 100 * 0.01) + 100 * 0.1 * math.expm1(0.1))
    summary = compose([(0.1, 0.0)] * 100, 1e-6)
    assert summary.pld_epsilon < summary.advanced_epsilon < summary.basic_epsilon
    assert summary.tightest == "pld"
    # No slack left: advanced composition says nothing, basic still holds.
    assert advanced_composition([(1.0, 1e-6)] * 3, 3e-6)[0] == math.inf


def test_mixed_runs_compose_like_dp_accounting_and_in_any_order() -> None:
    runs = [(1.0, 1e-7), (0.3, 0.0), (1.0, 1e-7), (2.0, 1e-8)]
    summary = compose(runs, 1e-5)
    step = summary.discretization
    plds = [pld_module.from_privacy_parameters(common.DifferentialPrivacyParameters(e, d), step) for e, d in runs]
    direct = plds[0].compose(plds[1]).compose(plds[2]).compose(plds[3]).get_epsilon_for_delta(1e-5)
    assert summary.pld_epsilon == pytest.approx(direct, abs=1e-6)
    assert compose(runs[::-1], 1e-5).pld_epsilon == pytest.approx(summary.pld_epsilon, abs=1e-9)


def test_runs_without_a_guarantee_make_the_total_infinite() -> None:
    summary = compose([(1.0, 1e-9), (math.inf, 1.0)], 1e-6)
    assert summary.epsilon == math.inf


# the ledger -----------------------------------------------------------------------
def test_ledger_records_runs_and_returns_the_cumulative_report(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    report = reference_report()
    first = ledger.record(report, "2026-01-01")
    second = ledger.record(report, "2026-01-02")
    assert first.composition.runs == 1 and second.composition.runs == 2
    assert second.composition == ledger.summary() == compose([(report.epsilon, report.delta)] * 2)
    assert second.epsilon == report.epsilon  # the run's own guarantee is unchanged
    assert [entry.run_id for entry in ledger.entries] == ["2026-01-01", "2026-01-02"]
    assert ledger.preview(report).runs == 3 and len(ledger.entries) == 2  # preview writes nothing
    stored = json.loads((tmp_path / "ledger.json").read_text())
    assert stored["cumulative"]["runs"] == 2


def test_budget_refusal_leaves_the_ledger_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    report = reference_report()  # ε ≈ 4 per run
    ledger.record(report, "day-1", max_epsilon=10)
    ledger.record(report, "day-2", max_epsilon=10)
    before = path.read_bytes()
    with pytest.raises(BudgetExceededError) as refused:
        ledger.record(report, "day-3", max_epsilon=10)
    assert path.read_bytes() == before
    error = refused.value
    assert error.after.runs == 3 and error.after.epsilon > 10 >= error.before.epsilon
    assert "privacy.max_epsilon" in str(error) and "day-3" in str(error) and "max_epsilon = 10" in str(error)
    assert [entry.run_id for entry in ledger.entries] == ["day-1", "day-2"]
    # A first run above the budget does not even create the file.
    with pytest.raises(BudgetExceededError):
        Ledger(tmp_path / "other.json").record(report, "day-1", max_epsilon=3)
    assert not (tmp_path / "other.json").exists()


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "4", True])
def test_budget_must_be_a_positive_number(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="privacy.max_epsilon"):
        Ledger(tmp_path / "ledger.json").record(reference_report(), "run", max_epsilon=bad)


def test_ledger_refuses_duplicates_other_adjacency_and_another_delta(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    ledger = Ledger(path, delta=1e-7)
    ledger.record(reference_report(), "run-1")
    with pytest.raises(LedgerError, match="run_id: 'run-1' is already charged"):
        ledger.record(reference_report(), "run-1")
    with pytest.raises(LedgerError, match="adjacency"):
        ledger.record(ldp_report(split_budget("pem", 2.0), "olh"), "run-2")
    with pytest.raises(LedgerError, match=r"total δ.*1e-07"):
        Ledger(path, delta=1e-8).summary()
    assert Ledger(path).summary().delta == 1e-7  # the stored δ applies when none is given
    assert len(Ledger(path).entries) == 1


def test_a_corrupt_ledger_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text('{"format": "fedhh-privacy-ledger", "version": 1, "runs": [{"run_id": ')
    with pytest.raises(LedgerError, match="not a readable privacy ledger"):
        Ledger(path).record(reference_report(), "run")
    assert path.read_text().endswith('"run_id": ')


def _edited_ledger(tmp_path: Path, edit) -> Path:  # noqa: ANN001
    """A ledger of two real runs, then hand-edited by ``edit(document)``."""
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    ledger.record(reference_report(), "day-1")
    ledger.record(reference_report(), "day-2")
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    return path


def _set(*keys: object, value: object):  # noqa: ANN202
    def edit(document: dict) -> None:
        target = document
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


@pytest.mark.parametrize(
    ("edit", "where", "problem"),
    [
        # a δ of 0.9 would let later runs pass the budget at a meaningless δ
        (_set("runs", 1, "report", "delta", value=0.9), r"runs\[1\] \(run_id 'day-2'\)\.report\.delta",
         r"must be a number in \[0, 1/n\) = \[0, 1e-06\) for n_users = 1,000,000, got 0\.9"),
        (_set("runs", value={}), "runs", r"must be a list of charged runs, got dict \{\}"),
        (_set("runs", 0, "report", "epsilon", value=True), r"runs\[0\] \(run_id 'day-1'\)\.report\.epsilon",
         "must be a finite number > 0, got true"),
        (_set("runs", 0, "report", "epsilon", value=-4.0), r"runs\[0\].*\.epsilon", "got -4.0"),
        (_set("runs", 0, "report", "epsilon", value="inf"), r"runs\[0\].*\.epsilon", 'got "inf"'),
        (_set("runs", 0, "report", "delta", value=None), r"runs\[0\].*\.delta", "got null"),
        (_set("runs", 0, "report", "parameters", "n_users", value="many"), r"parameters\.n_users", 'got "many"'),
        (_set("runs", 0, "report", "model", value="no guarantee: outside Theorem 1"), r"runs\[0\].*\.model",
         "without a guarantee"),
        (_set("runs", 0, "report", "adjacency", value=""), r"runs\[0\].*\.adjacency", "non-empty string"),
        (_set("runs", 1, "report", "adjacency", value="replace-one"), r"runs\[1\] \(run_id 'day-2'\)", "adjacency differs"),
        (_set("runs", 1, "run_id", value="day-1"), r"runs\[1\]", r"charged twice \(also runs\[0\]\)"),
        (_set("runs", 0, "recorded_at", value="yesterday"), r"runs\[0\].*\.recorded_at", "UTC time"),
        (_set("runs", 0, "note", value="x"), r"runs\[0\]", r"unknown key\(s\) \['note'\]"),
        (lambda document: document["runs"][0].pop("report"), r"runs\[0\]", r"missing key\(s\) \['report'\]"),
        (_set("runs", 0, value=[1, 2]), r"runs\[0\]", "must be a JSON object, got list"),
        (_set("delta", value=2), r"delta \(the total δ\)", "got 2"),
        (_set("delta", value=1e-3), r"delta \(the total δ\)", r"not below 1/n = 1/1,000,000"),
        (_set("version", value=True), "format, version", "version true"),
        # (ε, δ) that contradict the entry's own parameters (n, L, θ, m give ε = 3.9999, δ = 8.28e-13)
        (_set("runs", 0, "report", "epsilon", value=0.001), r"runs\[0\] \(run_id 'day-1'\)\.report: ",
         r"ε = 0\.001, δ = 8\.2\d+e-13 disagree with its own parameters, which give ε = 3\.999"),
        (_set("runs", 1, "report", "delta", value=1e-20), r"runs\[1\] \(run_id 'day-2'\)\.report: ",
         "disagree with its own parameters"),
        (_set("runs", 1, "report", "parameters", "batch_size", value=10), r"runs\[1\] \(run_id 'day-2'\)\.report: ",
         "disagree with its own parameters"),
        (lambda document: document["runs"][0]["report"]["parameters"].pop("theta"),
         r"runs\[0\] \(run_id 'day-1'\)\.report\.parameters", r"theta: must be an integer, got None"),
        (_set("runs", 0, "report", "model", value="central, my own proof"), r"runs\[0\].*\.model",
         "no accounting derives the guarantee of model 'central, my own proof'"),
    ],
)
def test_hand_edited_ledgers_are_refused_naming_the_file_and_the_entry(
    tmp_path: Path, edit, where: str, problem: str  # noqa: ANN001
) -> None:
    path = _edited_ledger(tmp_path, edit)
    before = path.read_bytes()
    for action in (lambda: Ledger(path).record(reference_report(), "day-3", max_epsilon=100),
                   lambda: Ledger(path).summary(), lambda: Ledger(path).preview(reference_report())):
        with pytest.raises(LedgerError) as refused:
            action()
        message = str(refused.value)
        assert message.startswith(f"privacy.ledger {str(path)!r}: "), message
        assert re.search(where, message) and re.search(problem, message), message
    assert path.read_bytes() == before  # left as is


def test_a_lowered_epsilon_cannot_make_room_in_the_budget(tmp_path: Path) -> None:
    """Two runs of ε = 4 against a budget of 8, then the first entry's ε edited down to 0.001: the
    ledger is refused (naming the file and the entry) instead of charging a third run (12 in all)."""
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    ledger.record(reference_report(), "day-1", max_epsilon=8)
    ledger.record(reference_report(), "day-2", max_epsilon=8)
    document = json.loads(path.read_text())
    document["runs"][0]["report"]["epsilon"] = 0.001
    path.write_text(json.dumps(document))
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=rf"privacy.ledger '{re.escape(str(path))}': runs\[0\] \(run_id 'day-1'\)"):
        ledger.record(reference_report(), "day-3", max_epsilon=8)
    assert path.read_bytes() == before


def test_ldp_entries_are_checked_against_their_split(tmp_path: Path) -> None:
    """An LDP run's ε is the sum of its reports' ε (``parameters.split``): an entry claiming less is
    refused; the stored runs of every registered protocol's report are accepted as written."""
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    for index, name in enumerate(name for name, spec in PROTOCOLS.items() if spec.budget is not None):
        ledger.record(ldp_report(split_budget(name, 2.0), "olh"), f"run-{index}")
    assert ledger.summary().runs == index + 1
    document = json.loads(path.read_text())
    document["runs"][0]["report"]["epsilon"] = 1.0
    path.write_text(json.dumps(document))
    disagreement = r"runs\[0\] \(run_id 'run-0'\)\.report: ε = 1\.0, δ = 0\.0 disagree .* give ε = 2\.0"
    with pytest.raises(LedgerError, match=disagreement):
        Ledger(path).summary()


def test_a_run_whose_report_contradicts_its_parameters_is_not_charged(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    edited = dataclasses.replace(reference_report(), epsilon=1.0)
    with pytest.raises(LedgerError, match=r"the run to charge \(run_id 'run'\)\.report: ε = 1\.0"):
        Ledger(path).record(edited, "run")
    assert not path.exists()


@pytest.mark.parametrize(
    ("ledger", "problem"),
    [
        ("/proc/nope/L.json", r"cannot create folders in '/proc' \(No such file or directory\)"),
        ("/sys/fedhh-ledger.json", r"cannot write in '/sys' \(.+\)"),  # read-only, even for root
        ("FILE/L.json", r"'.*FILE' is not a folder"),
    ],
)
def test_a_ledger_fedhh_cannot_write_is_refused_before_the_run(tmp_path: Path, ledger: str, problem: str) -> None:
    """The read-only preview (what every driver calls before it starts) refuses it, as charging does,
    naming the ledger; nothing is left behind."""
    (tmp_path / "FILE").write_text("a user's file\n")
    path = ledger.replace("FILE", str(tmp_path / "FILE"))
    for action in (lambda: Ledger(path).preview(reference_report()),
                   lambda: Ledger(path).record(reference_report(), "run")):
        with pytest.raises(LedgerError, match=rf"^privacy.ledger '{re.escape(path)}': {problem}; name a JSON file"):
            action()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]
    assert (tmp_path / "FILE").read_text() == "a user's file\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_ledger_in_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    try:
        with pytest.raises(LedgerError, match=r"cannot write in '.*locked' \(Permission denied\)"):
            Ledger(folder / "L.json").preview(reference_report())
    finally:
        folder.chmod(0o700)


def test_a_ledger_path_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"privacy.ledger '.*': not a regular file"):
        Ledger(tmp_path).record(reference_report(), "run")
    with pytest.raises(LedgerError, match=r"privacy.ledger '/dev/zero': not a regular file"):
        Ledger("/dev/zero").summary()


def test_runs_and_totals_without_a_meaningful_guarantee_are_not_charged(tmp_path: Path) -> None:
    """A run with no guarantee, or a cumulative δ not below 1/n, is refused with the ledger unchanged."""
    path = tmp_path / "ledger.json"
    broken = TrieHHParameters(n_users=1000, max_rounds=3, theta=1, batch_size=100).report()
    with pytest.raises(LedgerError, match=r"privacy.ledger: this run has no privacy guarantee \(no guarantee: outside Theorem 1"):
        Ledger(path).record(broken, "run")
    assert not path.exists()
    small = solve_triehh(10_000, 4.0, 5e-5, 10).report()  # θ = 8: δ ≈ 2.98e-5 < 1/n = 1e-4 for one run
    Ledger(path).record(small, "run-1")
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"cumulative guarantee would be stated at δ = 0\.000119, not below 1/n = 1/10,000"):
        Ledger(path).record(small, "run-2")  # 2 Σ δ_i = 1.19e-4
    assert path.read_bytes() == before


def test_a_failure_before_the_rename_keeps_the_previous_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    ledger.record(reference_report(), "run-1")
    before = path.read_bytes()

    def crash(source: str, destination: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ledger_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        ledger.record(reference_report(), "run-2")
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json", "ledger.json.lock"]


CRASH_MID_WRITE = textwrap.dedent(
    """
    import os, sys
    from fedhh.privacy import ledger as module
    from fedhh.privacy.triehh import solve_triehh

    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, stream):
            self.stream = stream
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return False
        def write(self, text):
            self.stream.write(text[: len(text) // 2])
            self.stream.flush()
            os._exit(17)  # the process dies with half the new ledger on disk

    module.os.fdopen = lambda fd, *a, **k: HalfWriter(real_fdopen(fd, *a, **k))
    module.Ledger(sys.argv[1]).record(solve_triehh(1_000_000, 4.0, 1e-12, 10).report(), "run-2")
    """
)


def test_a_process_killed_mid_write_leaves_the_previous_ledger_readable(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    Ledger(path).record(reference_report(), "run-1")
    before = path.read_bytes()
    crashed = subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(path)], cwd=REPO, capture_output=True)
    assert crashed.returncode == 17, crashed.stderr.decode()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1  # the half-written temporary file, never the ledger
    assert path.read_bytes() == before
    ledger = Ledger(path)
    assert [entry.run_id for entry in ledger.entries] == ["run-1"]
    ledger.record(reference_report(), "run-2")  # and the ledger keeps working
    assert ledger.summary().runs == 2


def _record_many(path: str, prefix: str, count: int) -> None:
    ledger = Ledger(path)
    for index in range(count):
        ledger.record(PrivacyReport.from_dict(reference_report().to_dict()), f"{prefix}-{index}")


def test_concurrent_jobs_do_not_lose_runs(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.json")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_record_many, args=(path, name, 8)) for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert len(Ledger(path).entries) == 16


# plans ----------------------------------------------------------------------------
def test_triehh_plan_has_the_solved_parameters_and_discovery_rates() -> None:
    planned = plan("triehh", n_users=1_000_000, epsilon=4.0, delta=1e-12, max_rounds=10)
    assert (planned["theta"], planned["batch_size"]) == (15, 21_978)
    assert planned["privacy"]["epsilon"] == planned["epsilon"] <= 4.0
    rates = list(planned["worst_case_discovery_rate"].values())
    assert rates == sorted(rates) and 0 <= rates[0] < rates[-1] <= 1  # rarer items are found less often
    json.dumps(planned)  # JSON-ready


def plan_unplanned(n_users: int, epsilon: float) -> dict:
    return {"protocol": "unplanned", "n_users": n_users}


def test_planners_are_found_through_the_protocol_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"protocol.name: no planner for 'unplanned'; allowed: \[.*'triehh'\]"):
        plan("unplanned", n_users=1000, epsilon=1.0)
    spec = dataclasses.replace(PROTOCOLS["pem"], name="unplanned", planner=plan_unplanned)
    monkeypatch.setitem(PROTOCOLS, "unplanned", spec)  # removed again afterwards
    assert plan("unplanned", n_users=1000, epsilon=1.0) == {"protocol": "unplanned", "n_users": 1000}
    with pytest.raises(ValueError, match="already registered"):
        register_protocol(PROTOCOLS["triehh"])


DOCS_TABLE = "markdown_table(triehh_table([100_000, 1_000_000, 10_000_000], [1, 2, 4, 8], 1e-12, 10))"


def test_the_table_in_the_docs_is_the_library_s() -> None:
    """docs/privacy.md shows the command that generates its table; regenerate and compare."""
    text = (REPO / "docs" / "privacy.md").read_text(encoding="utf-8")
    assert DOCS_TABLE in text
    assert markdown_table(triehh_table([100_000, 1_000_000, 10_000_000], [1, 2, 4, 8], 1e-12, 10)) in text


def test_the_accounting_imports_no_protocol_and_no_tool() -> None:
    """fedhh/privacy/ sits below the protocols: none of its modules imports a protocol, a planner or an
    audit (each of those imports the accounting, so the other way round would be a cycle of layers)."""
    import ast

    above = ("fedhh.protocols", "fedhh.planning", "fedhh.audits", "simulations", "strategies")
    for path in sorted((REPO / "fedhh" / "privacy").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [("fedhh." if node.level == 2 else "fedhh.privacy." if node.level == 1 else "") + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not [name for name in names if name.startswith(above)], f"{path.name} imports {names}"
