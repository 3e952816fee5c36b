"""``fedhh audit``: measure a lower bound on the ε a protocol really spends.

``fedhh audit triehh`` runs the Monte Carlo audit of :mod:`fedhh.privacy.audit`
(one round, vectorised; a whole run, with the real protocol code) and prints
the lower bound next to the exact worst case of the audited family and the
guarantee.  ``fedhh audit ldp`` runs the exact audit of an LDP randomizer of
the oracle layer (:mod:`fedhh.privacy.ldp_audit`).  Handlers return the exit
status: 0, or 1 when a lower bound exceeds the guarantee (a bug in the
mechanism or the accountant).  Bad input raises ``ValueError`` naming the
option, which ``fedhh``'s main turns into status 2.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ..errors import InputError
from ..results import to_json
from .audit import DEFAULT_CONFIDENCE, OBSERVABLES, TrieHHAudit, audit_round, audit_run, exact_round_epsilon
from .ldp_audit import audit_oracle
from .triehh import TrieHHParameters, solve_triehh

EXIT_VIOLATION = 1


def add_audit_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``audit triehh`` and ``audit ldp``; each handler is its parser's ``func``."""
    audit = subparsers.add_parser(
        "audit",
        help="measure a lower bound on the ε actually spent (Monte Carlo / exact)",
        description="Empirical privacy audits: lower bounds on ε next to the guarantee.",
    )
    kinds = audit.add_subparsers(dest="audited", required=True)

    triehh = kinds.add_parser(
        "triehh",
        help="TrieHH on worst-case neighbouring populations (one round and a whole run)",
        description="D has n users, c of whom hold the target's item; D' adds the target. "
        "Sweeps c, picks the distinguishing event per c, and bounds ε from below with "
        "Clopper-Pearson intervals (Bonferroni over the sweep).",
    )
    triehh.add_argument("--users", type=int, required=True, help="population size n")
    triehh.add_argument("--delta", type=float, required=True,
                        help="target δ in (0, 1); the audit runs at the δ the parameters meet")
    triehh.add_argument("--max-rounds", type=int, required=True, help="L: rounds (longest item + end symbol)")
    triehh.add_argument("--epsilon", type=float, help="target ε > 0 (parameters solved as in `fedhh run`)")
    triehh.add_argument("--theta", type=int, help="audit this threshold instead of solving (with --batch-size)")
    triehh.add_argument("--batch-size", type=int, help="audit this batch size m instead of solving (with --theta)")
    triehh.add_argument("--trials", type=int, default=1_000_000, help="one-round draws per population and c (default 1e6)")
    triehh.add_argument("--run-trials", type=int, default=2000,
                        help="whole runs per population and c, half to choose the event (default 2000; 0 skips)")
    triehh.add_argument("--holders", type=_holder_list, help="c values to sweep, comma-separated (default: a sweep)")
    triehh.add_argument("--observe", choices=OBSERVABLES, default="trie",
                        help="whole-run output audited: the trie (covered by the theorem) or the server's raw vote totals")
    triehh.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE, help="confidence of the bounds (default 0.95)")
    triehh.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    triehh.add_argument("--json", action="store_true", help="print JSON instead of tables")
    triehh.set_defaults(func=run_triehh_audit)

    ldp = kinds.add_parser(
        "ldp",
        help="an LDP frequency oracle, exactly, on a small domain",
        description="Exact likelihood ratios of the oracle layer's randomizer over every pair of values.",
    )
    ldp.add_argument("--oracle", required=True, help="oracle name as in fedhh.oracles.make_oracle (e.g. grr, oue, olh)")
    ldp.add_argument("--epsilon", type=float, required=True, help="the oracle's ε > 0")
    ldp.add_argument("--domain", type=int, default=8, help="domain size d, 2..64 (default 8)")
    ldp.add_argument("--samples", type=int, default=2000, help="reports drawn per value (default 2000)")
    ldp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ldp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ldp.set_defaults(func=run_ldp_audit)
    return audit


def _holder_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--holders: expected comma-separated integers, got {text!r}") from None


def _parameters(args: argparse.Namespace) -> TrieHHParameters:
    explicit = (args.theta is not None, args.batch_size is not None)
    if any(explicit) and not all(explicit):
        raise InputError("--theta and --batch-size: give both to audit explicit parameters, or neither")
    if all(explicit):
        return TrieHHParameters(args.users, args.max_rounds, args.theta, args.batch_size)
    if args.epsilon is None:
        raise InputError("--epsilon: required unless --theta and --batch-size are given")
    return solve_triehh(args.users, args.epsilon, args.delta, args.max_rounds)


def run_triehh_audit(args: argparse.Namespace) -> int:
    params = _parameters(args)
    report = params.report()
    delta = report.delta if report.has_guarantee else args.delta
    one_round = audit_round(params, delta, args.trials, args.seed, args.holders, args.confidence)
    worst, worst_holders = exact_round_epsilon(params, delta)
    whole = (
        audit_run(params, delta, args.run_trials, args.seed, args.holders, args.confidence, args.observe)
        if args.run_trials else None
    )
    audits = [a for a in (one_round, whole) if a is not None]
    violated = any(a.violated for a in audits if a.observe == "trie")
    if args.json:
        document = {
            "privacy": report.to_dict(),
            "exact_round_worst": {"epsilon": worst, "holders": worst_holders},
            **{a.scope: a.to_dict() for a in audits},
        }
        print(to_json(document))
        return EXIT_VIOLATION if violated else 0
    console = Console()
    console.print(
        f"TrieHH n = {params.n_users:,}, L = {params.max_rounds}, θ = {params.theta}, m = {params.batch_size:,}: "
        f"{report.summary()}"
    )
    for audit in audits:
        console.print(_audit_table(audit))
        console.print(_verdict(audit))
    console.print(
        f"exact one-round ε at δ = {delta:.3g} over every c: {worst:.4g} (at c = {worst_holders}) "
        f"against {one_round.claimed_epsilon:.4g} per round from the theorem"
    )
    return EXIT_VIOLATION if violated else 0


def _audit_table(audit: TrieHHAudit) -> Table:
    title = "one round" if audit.scope == "round" else f"whole run, observing the {audit.observe}"
    table = Table(title=f"{title}: {audit.events[0].trials:,} trials per population and c")
    for column in ("c", "event", "hits in D", "hits in D'", "ε ≥ (MC)", "exact ε"):
        table.add_column(column, justify="left" if column == "event" else "right")
    for event in audit.events:
        table.add_row(
            str(event.holders),
            event.event,
            f"{event.hits_without:,}",
            f"{event.hits_with:,}",
            f"{max(event.epsilon_lower, 0.0):.4g}",
            "—" if event.epsilon_exact is None else f"{event.epsilon_exact:.4g}",
        )
    return table


def _verdict(audit: TrieHHAudit) -> str:
    exact = "" if audit.epsilon_exact is None else f", exact over the swept c {audit.epsilon_exact:.4g}"
    line = (
        f"{audit.scope}: measured ε ≥ {audit.epsilon_lower:.4g} ({audit.confidence:.0%} confidence){exact}; "
        f"guarantee {audit.claimed_epsilon:.4g} at δ = {audit.delta:.3g}"
    )
    if audit.violated and audit.observe == "server":
        return line + " — [bold red]the server's raw votes are not covered by the theorem and leak beyond it[/]"
    if audit.violated:
        return line + " — [bold red]VIOLATION: lower bound above the guarantee[/]"
    return line


def run_ldp_audit(args: argparse.Namespace) -> int:
    audit = audit_oracle(args.oracle, args.epsilon, args.domain, args.samples, args.seed)
    if args.json:
        print(to_json(audit.to_dict()))
        return EXIT_VIOLATION if audit.violated else 0
    table = Table(title=f"LDP audit: {audit.oracle}, ε = {audit.claimed_epsilon:g}, d = {audit.domain}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("distinct reports seen", f"{audit.distinct_reports:,}")
    table.add_row("probability mass seen (min over values)", f"{audit.coverage:.6f}")
    table.add_row("enumeration complete", "yes" if audit.exhaustive else "no (ε is a lower bound)")
    table.add_row("exact ε over the reports seen", f"{audit.epsilon_lower:.6g}")
    table.add_row("worst value pair (v, v')", str(audit.worst_values))
    table.add_row(f"δ at ε = {audit.claimed_epsilon:g} (upper bound)", f"{audit.delta_upper:.3g}")
    Console().print(table)
    return EXIT_VIOLATION if audit.violated else 0

