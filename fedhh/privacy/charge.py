"""Charging a run to its configured ledger: the one way every driver does it.

``privacy.ledger`` names the ledger that composes repeated runs on the same
users, and ``privacy.max_epsilon`` its budget.  Whatever carries the rounds
(the fast driver inside ``fedhh run``, the Flower ServerApp under ``fedhh
run``, ``flwr run`` or ``simulations.deployment``), the run is charged by
:func:`charge_run` exactly once, after every other check passed and before
round 1: a run that crashes half-way may already have released rounds, so
its budget stays spent.  :func:`check_budget` is the read-only preview a
driver can use to refuse a run over budget before starting anything
costly (processes, Ray), leaving the charge itself to the ServerApp.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from ..data.deny_list import DenyList
from .ledger import BudgetExceededError, Ledger
from .report import PrivacyReport


def run_label(name: str) -> str:
    """A ledger name for one run: ``name`` (its results folder) and when it started,
    e.g. ``day-1@2026-01-01T06:00:00.123Z``.

    Unique per run even when a results folder is replaced (``--overwrite``),
    so the ledger's refusal of a run charged twice keeps its meaning.
    """
    now = datetime.datetime.now(datetime.UTC)
    return f"{name}@{now.strftime('%Y-%m-%dT%H:%M:%S')}.{now.microsecond // 1000:03d}Z"


def _ledger(privacy: Mapping[str, Any]) -> tuple[Ledger, float | None] | None:
    if not privacy["ledger"]:
        return None
    return Ledger(privacy["ledger"]), (privacy["max_epsilon"] or None)


def check_budget(privacy: Mapping[str, Any], report: PrivacyReport, run_id: str) -> None:
    """Refuse now (ledger unchanged) a run that charging would refuse; ``privacy`` is the ``[privacy]`` section."""
    configured = _ledger(privacy)
    if configured is None:
        return
    ledger, budget = configured
    after = ledger.preview(report)  # also reads and checks the ledger file
    if budget is not None and not after.epsilon <= budget:
        raise BudgetExceededError(run_id, budget, ledger.summary(), after)


def charge_run(
    privacy: Mapping[str, Any], report: PrivacyReport, run_id: str, deny_list: DenyList | None = None
) -> PrivacyReport:
    """Charge the run to the configured ledger; its report with the cumulative guarantee attached.
    A run with a ``deny_list`` (``run.deny_list``) is charged with the list's source, which links
    it to the run it continues (:meth:`fedhh.privacy.ledger.Ledger.record`).

    Without a ledger the report is returned unchanged.  A run over the
    budget raises :class:`~fedhh.privacy.ledger.BudgetExceededError`, with
    the ledger unchanged and nothing run.
    """
    configured = _ledger(privacy)
    if configured is None:
        return report
    ledger, budget = configured
    return ledger.record(
        report, run_id, max_epsilon=budget, deny_list=None if deny_list is None else deny_list.source()
    )
