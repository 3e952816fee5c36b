"""``fedhh audit``: measure a lower bound on the ε a protocol really spends.

``fedhh audit triehh`` runs the Monte Carlo audit of :mod:`fedhh.audits.triehh`
(one round, vectorised; a whole run, with the real protocol code) and prints
the lower bound next to the exact worst case of the audited family and the
guarantee.  ``fedhh audit ldp`` runs the exact audit of an LDP randomizer of
the oracle layer (:mod:`fedhh.audits.ldp`), and ``fedhh audit central`` the
curator baseline's noisy threshold (:mod:`fedhh.audits.central`), and ``fedhh audit
aggregate-trie`` the aggregate-DP prefix tree's composed levels (:mod:`fedhh.audits.aggregate_trie`).
Handlers return the exit
status: 0, or 1 when a lower bound exceeds the guarantee (a bug in the
mechanism or the accountant).  Bad input raises ``ValueError`` naming the
option, which ``fedhh``'s main turns into status 2.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedhh.audits.aggregate_trie import audit_aggregate_trie
from fedhh.audits.central import audit_central
from fedhh.audits.ldp import audit_oracle
from fedhh.audits.triehh import (
    DEFAULT_CONFIDENCE,
    OBSERVABLES,
    TrieHHAudit,
    audit_round,
    audit_run,
    default_holders,
    exact_round_epsilon,
    run_holders,
)
from fedhh.errors import InputError
from fedhh.privacy.aggregate_trie import solve_aggregate_trie
from fedhh.privacy.central import GAUSSIAN, LAPLACE, NOISES, solve_central
from fedhh.privacy.triehh import TrieHHParameters, solve_triehh
from fedhh.results import to_json

EXIT_VIOLATION = 1


def add_audit_arguments(audit: argparse.ArgumentParser) -> None:
    """``audit triehh`` and ``audit ldp`` under the ``audit`` subcommand; each handler is its parser's ``func``."""
    audit.description = "Empirical privacy audits: lower bounds on ε next to the guarantee."
    kinds = audit.add_subparsers(dest="audited", required=True)

    triehh = kinds.add_parser(
        "triehh",
        help="TrieHH on worst-case neighbouring populations (one round and a whole run)",
        description="D has n users, c of whom hold the target's item; D' adds the target. "
        "Sweeps c, picks the distinguishing event per c, and bounds ε from below with confidence "
        "bounds (Bonferroni over the sweep); rare passes are importance sampled from a population "
        "with more holders and weighted back by exact likelihood ratios.",
    )
    triehh.add_argument("--users", type=int, required=True, help="population size n")
    triehh.add_argument(
        "--delta", type=float, required=True, help="target δ in (0, 1); the audit runs at the δ the parameters meet"
    )
    triehh.add_argument("--max-rounds", type=int, required=True, help="L: rounds (longest item + end symbol)")
    triehh.add_argument("--epsilon", type=float, help="target ε > 0 (parameters solved as in `fedhh run`)")
    triehh.add_argument("--theta", type=int, help="audit this threshold instead of solving (with --batch-size)")
    triehh.add_argument("--batch-size", type=int, help="audit this batch size m instead of solving (with --theta)")
    triehh.add_argument(
        "--trials", type=int, default=1_000_000, help="one-round draws per population and c (default 1e6)"
    )
    triehh.add_argument(
        "--run-trials",
        type=int,
        default=1000,
        help="whole runs per population and c (the server view chooses its event on half of them; "
        "default 1000; 0 skips)",
    )
    triehh.add_argument("--holders", type=_holder_list, help="c values to sweep, comma-separated (default: a sweep)")
    triehh.add_argument(
        "--observe",
        choices=OBSERVABLES,
        default="trie",
        help="whole-run output audited: the trie (covered by the theorem) or the server's raw vote totals",
    )
    _add_closing_options(triehh, "print JSON instead of tables")
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
    _add_closing_options(ldp, confidence=False)
    ldp.set_defaults(func=run_ldp_audit)

    central = kinds.add_parser(
        "central",
        help="the curator baseline's noisy threshold, on neighbouring populations",
        description="D has c users sending the target item, D' one more; the curator's own noise and threshold "
        "drawn many times, events fixed in advance, Clopper-Pearson bounds (Bonferroni): lower bounds on ε at "
        "the claimed δ and on δ at the claimed ε.",
    )
    _add_central_target(central, "target ε > 0")
    central.add_argument("--noise", choices=NOISES, default=LAPLACE, help="noise of the counts (default laplace)")
    central.add_argument("--trials", type=int, default=200_000, help="draws per population and c (default 200,000)")
    central.add_argument("--holders", type=_holder_list, help="c values, comma-separated (default: 0, 1 and near τ)")
    _add_closing_options(central)
    central.set_defaults(func=run_central_audit)

    tree = kinds.add_parser(
        "aggregate-trie",
        help="the aggregate-DP prefix tree's composed levels, on neighbouring populations",
        description="D holds nothing of the target; D' adds a user who, sampled in a level, adds 1 to its "
        "candidates' counts. The server's own noise drawn many times; the sum of the target's noisy counts over "
        "the levels against thresholds fixed in advance, Clopper-Pearson bounds (Bonferroni): a lower bound on "
        "ε at the claimed δ.",
    )
    _add_central_target(tree, "target ε > 0 over the whole run")
    tree.add_argument("--noise", choices=NOISES, default=GAUSSIAN, help="noise of the counts (default gaussian)")
    tree.add_argument("--levels", type=int, default=6, help="levels of the run (default 6: 10 letters by 2)")
    tree.add_argument("--users-per-level", type=int, default=0, help="users sampled per level (default 0: all)")
    tree.add_argument("--contributions", type=int, default=1, help="counts a user moves per level (default 1)")
    tree.add_argument("--trials", type=int, default=1_000_000, help="draws per population (default 1,000,000)")
    _add_closing_options(tree)
    tree.set_defaults(func=run_aggregate_trie_audit)


def _add_central_target(parser: argparse.ArgumentParser, epsilon_help: str) -> None:
    """The central (ε, δ) target of a population of n users, which a curator's audit is run at."""
    parser.add_argument("--users", type=int, required=True, help="population size n (δ must be below 1/n)")
    parser.add_argument("--epsilon", type=float, required=True, help=epsilon_help)
    parser.add_argument("--delta", type=float, required=True, help="target δ in (0, 1/n)")


def _add_closing_options(
    parser: argparse.ArgumentParser, json_help: str = "print JSON instead of a table", confidence: bool = True
) -> None:
    """The options every audit ends with: the bounds' confidence (where it has bounds of Monte Carlo
    draws), the seed and JSON output."""
    if confidence:
        parser.add_argument(
            "--confidence", type=float, default=DEFAULT_CONFIDENCE, help="confidence of the bounds (default 0.95)"
        )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _exit_status(violated: bool) -> int:
    return EXIT_VIOLATION if violated else 0


def _events_table(title: str, columns: tuple[str, ...]) -> Table:
    """An audit's table of events: the event's column left, the figures right."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column == "event" else "right")
    return table


def _print_audit(table: Table, line: str, violated: bool) -> int:
    """Print an audit's ``table`` and closing ``line``, marked when a lower bound is above the guarantee;
    the exit status."""
    console = Console()
    console.print(table)
    console.print(line + (" — [bold red]VIOLATION: a lower bound above the guarantee[/]" if violated else ""))
    return _exit_status(violated)


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
    round_points = len(default_holders(params, 12, delta)) if args.holders is None else len(set(args.holders))
    run_points = len(run_holders(params, delta, args.observe)) if args.holders is None else len(set(args.holders))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        draws = progress.add_task("one round: vote counts drawn", total=2 * round_points * args.trials)
        one_round = audit_round(
            params,
            delta,
            args.trials,
            args.seed,
            args.holders,
            args.confidence,
            lambda done: progress.advance(draws, done),
        )
        whole = None
        if args.run_trials:
            runs = progress.add_task("whole runs of the real protocol", total=2 * run_points * args.run_trials)
            whole = audit_run(
                params,
                delta,
                args.run_trials,
                args.seed,
                args.holders,
                args.confidence,
                args.observe,
                lambda done: progress.advance(runs, done),
            )
    worst, worst_holders = exact_round_epsilon(params, delta)
    audits = [a for a in (one_round, whole) if a is not None]
    violated = any(a.violated for a in audits if a.observe == "trie")
    if args.json:
        document = {
            "privacy": report.to_dict(),
            "exact_round_worst": {"epsilon": worst, "holders": worst_holders},
            **{a.scope: a.to_dict() for a in audits},
        }
        print(to_json(document))
        return _exit_status(violated)
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
    return _exit_status(violated)


def _audit_table(audit: TrieHHAudit) -> Table:
    title = "one round" if audit.scope == "round" else f"whole run, observing the {audit.observe}"
    unit = "vote counts" if audit.scope == "round" else "runs"
    table = _events_table(
        f"{title}: {audit.events[0].trials:,} {unit} per population and c",
        ("c", "drawn with", "event", "P in D", "P in D'", "ε ≥ (MC)", "exact ε"),
    )
    for event in audit.events:
        table.add_row(
            str(event.holders),
            "—" if event.proposal_holders == event.holders else f"{event.proposal_holders} holders",
            event.event,
            f"{event.probability_without:.3g}",
            f"{event.probability_with:.3g}",
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
    if not audit.informative:
        unit = "vote counts" if audit.scope == "round" else "runs"
        needed = [e.trials_needed for e in audit.events if e.trials_needed is not None]
        more = (
            f"; about --run-trials {min(needed):,} would make it informative, going by the spread of these runs"
            if needed
            else ""
        )
        return line + (
            f"\n[bold yellow]uninformative:[/] no event measured on {audit.events[0].trials:,} {unit} per population "
            "separated D from D' beyond δ, so this bound proves nothing either way"
            + (
                f"; the loss lives in events too rare for this many runs{more}; the one-round audit measures "
                "the same loss far more cheaply (a run's loss at δ comes from its first round)"
                if audit.scope == "run"
                else "; try more --trials"
            )
        )
    return line


def run_ldp_audit(args: argparse.Namespace) -> int:
    audit = audit_oracle(args.oracle, args.epsilon, args.domain, args.samples, args.seed)
    if args.json:
        print(to_json(audit.to_dict()))
        return _exit_status(audit.violated)
    table = Table(title=f"LDP audit: {audit.oracle}, ε = {audit.claimed_epsilon:g}, d = {audit.domain}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    if audit.conditional_on is not None:
        table.add_row(
            f"audited conditionally on the {audit.conditional_on}",
            f"{audit.public_draws:,} drawn, every bucket of each",
        )
        table.add_row(
            f"{audit.conditional_on} independent of the value", "yes" if audit.exhaustive else "[bold red]no[/]"
        )
    table.add_row(
        "distinct reports enumerated" if audit.conditional_on else "distinct reports seen",
        f"{audit.distinct_reports:,}",
    )
    if audit.conditional_on is None:
        table.add_row("probability mass seen (min over values)", f"{audit.coverage:.6f}")
        table.add_row("enumeration complete", "yes" if audit.exhaustive else "no (ε is a lower bound)")
    scope = f"given each {audit.conditional_on}" if audit.conditional_on else "over the reports seen"
    table.add_row(f"exact ε {scope}", f"{audit.epsilon_lower:.6g}")
    table.add_row("worst value pair (v, v')", str(audit.worst_values))
    bound = f"exact, worst {audit.conditional_on}" if audit.conditional_on else "upper bound"
    table.add_row(f"δ at ε = {audit.claimed_epsilon:g} ({bound})", f"{audit.delta_upper:.3g}")
    Console().print(table)
    if not audit.exhaustive and audit.conditional_on is None:
        Console().print(
            f"[bold]uninformative δ:[/] the reports seen carry {audit.coverage:.1%} of the probability, so δ is only "
            "bounded by the mass not seen; ε above is still an exact lower bound"
            if audit.delta_upper > 0.5
            else "ε above is a lower bound: not every report was seen"
        )
    return _exit_status(audit.violated)


def run_central_audit(args: argparse.Namespace) -> int:
    params = solve_central(args.users, args.epsilon, args.delta, args.noise)
    audit = audit_central(params, args.holders, args.trials, args.seed, args.confidence)
    if args.json:
        print(to_json({"privacy": params.report().to_dict(), "audit": audit.to_dict()}))
        return _exit_status(audit.violated)
    table = _events_table(
        f"central ({args.noise}), scale {params.scale:.4g}, τ = {params.threshold:.4g}: "
        f"{audit.trials:,} draws per population and c",
        ("c", "event", "P in D", "P in D'", "ε ≥", "δ ≥"),
    )
    for pair in audit.pairs:
        table.add_row(
            str(pair.holders),
            pair.event or "—",
            f"{pair.probability_without:.3g}",
            f"{pair.probability_with:.3g}",
            f"{max(pair.epsilon_lower, 0.0):.4g}",
            f"{max(pair.delta_lower, 0.0):.3g}",
        )
    line = (
        f"measured ε ≥ {max(audit.epsilon_lower, 0.0):.4g} and δ ≥ {max(audit.delta_lower, 0.0):.3g} "
        f"({audit.confidence:.0%} confidence) against the guarantee (ε = {audit.claimed_epsilon:.4g}, "
        f"δ = {audit.claimed_delta:.3g})"
    )
    return _print_audit(table, line, audit.violated)


def run_aggregate_trie_audit(args: argparse.Namespace) -> int:
    if args.users_per_level > args.users or args.users_per_level < 0:
        raise InputError(f"--users-per-level: must be in 0..{args.users:,}, got {args.users_per_level}")
    rate = 1.0 if args.users_per_level == 0 else args.users_per_level / args.users
    params = solve_aggregate_trie(
        args.users, args.epsilon, args.delta, args.noise, args.contributions, rate, args.levels
    )
    audit = audit_aggregate_trie(params, args.trials, args.seed, args.confidence)
    if args.json:
        print(to_json({"privacy": params.report().to_dict(), "audit": audit.to_dict()}))
        return _exit_status(audit.violated)
    table = _events_table(
        f"aggregate-trie ({args.noise}), scale {params.scale:.4g}, {params.levels} levels, "
        f"q = {rate:.3g}: {audit.trials:,} draws per population",
        ("event", "P in D", "P in D'"),
    )
    for threshold, without, with_user in zip(
        audit.thresholds, audit.probabilities_without, audit.probabilities_with, strict=True
    ):
        table.add_row(f"sum of the target's counts above {threshold:.4g}", f"{without:.3g}", f"{with_user:.3g}")
    line = (
        f"measured ε ≥ {max(audit.epsilon_lower, 0.0):.4g} at δ = {audit.claimed_delta:.3g} "
        f"({audit.confidence:.0%} confidence) against the guarantee ε = {audit.claimed_epsilon:.4g}"
    )
    return _print_audit(table, line, audit.violated)
