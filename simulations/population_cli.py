"""``fedhh population build``: registered by :mod:`simulations.cli`; the builder is imported when it runs."""

from __future__ import annotations

import argparse


def add_population_arguments(population: argparse.ArgumentParser) -> None:
    """The ``population`` command's actions (``build``) on its parser."""
    actions = population.add_subparsers(dest="action", required=True)
    build = actions.add_parser(
        "build",
        help="write a config's population to a folder (Parquet shards and a manifest)",
        description="Build the population of CONFIG's [population] section (wordfreq, zipf, exponential, or a file "
        'of user,item rows; with population.per_user = "mode", each user\'s most frequent item alone) into DIR: '
        "one Parquet file per shard, vocabulary.parquet with the true counts, and population.json. Run from it "
        'with population.source = "dataset" and population.path = DIR.',
    )
    build.add_argument("config", nargs="?", help="TOML config (defaults apply to missing keys)")
    build.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one config value (repeatable)"
    )
    build.add_argument("--output", required=True, help="the population folder, new or empty")
    build.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output if it holds a population fedhh built (and nothing else)",
    )
    build.add_argument(
        "--shards",
        type=int,
        help="stored shards (default: one per 4,194,304 users; for a file, also one per 4,194,304 rows)",
    )
    build.add_argument("--workers", type=int, help="worker processes (default: the cores available)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument(
        "--json",
        action="store_true",
        help="print a JSON summary on stdout (the folder, its files, users, items, shards, bytes) "
        "instead of the closing line",
    )
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from rich.console import Console

    from fedhh.config import load_config
    from fedhh.resources import size_text
    from fedhh.results import ResultsFolder

    from .population_build import build_population

    config = load_config(args.config, args.set)
    with ResultsFolder.claim(args.output, overwrite=args.overwrite, field="--output") as output:
        manifest = build_population(config, output, args.shards, args.workers, show_progress=not args.quiet)
    disk = sum(entry.stat().st_size for entry in output.path.iterdir() if entry.is_file())
    if args.json:
        import json

        files = sorted(
            str(entry) for entry in output.path.iterdir() if entry.is_file() and not entry.name.startswith(".")
        )
        print(
            json.dumps(
                {
                    "folder": str(output.path),
                    "files": files,
                    "bytes": disk,
                    "users": manifest["users"],
                    "items": manifest["vocabulary"]["items"],
                    "shards": len(manifest["shards"]),
                    "seconds": manifest["build"]["seconds"],
                    "run_with": {"population.source": "dataset", "population.path": str(output.path)},
                    "exit_status": 0,
                    "exit_meaning": "the population was built",
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    Console().print(
        f"[bold]population[/] {manifest['users']:,} users, {manifest['vocabulary']['items']:,} items, "
        f"{len(manifest['shards'])} shards, {size_text(disk)} in {output.path} "
        f"({manifest['build']['seconds']:.1f} s); run from it with "
        f"--set population.source=dataset --set population.path={output.path}"
    )
    return 0
