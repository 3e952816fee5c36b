"""Imports point down only: simulations -> strategies -> fedhh, and inside fedhh from floor to floor.

Read from the source (every ``import`` and ``from ... import`` statement,
at module level, inside a function or under ``TYPE_CHECKING``, since a lazy
import is still an upward dependency), so a forbidden import fails here even
where no test happens to run the line that holds it.  Inside ``fedhh/`` each
module sits on one of :data:`FLOORS` and imports only from its own floor or
the floors below; and no module of the three packages imports itself back
through others (an import circle).
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The top-level packages ``path`` imports (absolute imports; relative ones stay in its package), with
    the line of each import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def upward_imports(package: str, above: tuple[str, ...]) -> list[str]:
    """``file:line imports name`` for every import in ``package`` of a package in ``above``."""
    return sorted(
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in (ROOT / package).rglob("*.py")
        for name, line in imported_packages(path)
        if name in above
    )


def test_the_reader_sees_lazy_and_dotted_imports(tmp_path: Path) -> None:
    """The check itself can fail: a function-level ``from simulations.x import y`` and a plain
    ``import strategies.codec`` are both seen; a relative import is not a package's."""
    module = tmp_path / "module.py"
    module.write_text(
        "import os\nfrom . import sibling\n\n"
        "def late():\n    from simulations.run import run_experiment\n    import strategies.codec\n"
    )
    assert imported_packages(module) == {("os", 1), ("simulations", 5), ("strategies", 6)}


@pytest.mark.parametrize(("package", "above"), [("fedhh", ("simulations", "strategies")), ("strategies", ("simulations",))])
def test_a_layer_imports_nothing_above_it(package: str, above: tuple[str, ...]) -> None:
    assert upward_imports(package, above) == []


# The floors of fedhh, bottom first: a module imports from its own floor and the floors below only.
# "fedhh.data.*" is that package and everything in it; a name without ".*" is that module alone.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernels", ("fedhh.kernels.*",)),  # keyed randomness, samplers, Bernoulli bits, BLAS
    ("basics", ("fedhh.version", "fedhh.errors", "fedhh.schema", "fedhh.resources", "fedhh.results", "fedhh.metrics",
                "fedhh.run_clock", "fedhh.result_tables", "fedhh.studies")),
    ("data", ("fedhh.data.*",)),  # items, users and shards, sources, the population store
    ("oracles", ("fedhh.oracles.*", "fedhh.postprocess")),  # frequency oracles and their post-processing
    ("privacy", ("fedhh.privacy.*",)),  # accounting
    ("planning", ("fedhh.planning.*",)),  # what every protocol's planner and sizing share
    ("protocols", ("fedhh.protocols.*",)),  # the contract, the registry and one package per protocol
    ("config", ("fedhh.config",)),  # experiment configs, whose schema holds every registered protocol's keys
    ("tools", ("fedhh.experiment", "fedhh.driving", "fedhh.audits.*")),  # what runs and audits the protocols
    ("api", ("fedhh", "fedhh.api")),  # the package's own names (fedhh.run, ...): everything below them
)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name (a package by its own name)."""
    return {module_name(root, path): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def module_imports(root: Path, path: Path, modules: Mapping[str, Path]) -> set[tuple[str, int]]:
    """The modules among ``modules`` that ``path`` imports, with the line of each import: a name
    imported from a package is the package's submodule of that name if there is one, else the package."""
    me = module_name(root, path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != me:
                found.add((target, node.lineno))
    return found


def floor_of(module: str, floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> int | None:
    """The index of the floor ``module`` sits on, or ``None``."""
    for index, (_, names) in enumerate(floors):
        for name in names:
            package = name.removesuffix(".*")
            if module == package or (name.endswith(".*") and module.startswith(package + ".")):
                return index
    return None


def upward_floor_imports(root: Path, floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> list[str]:
    """``file:line module (floor) imports module (floor)`` for every import of a higher floor, and
    ``module has no floor`` for every fedhh module outside them."""
    modules = modules_of(root, ["fedhh"])
    problems = [f"{module} has no floor" for module in modules if floor_of(module, floors) is None]
    for module, path in modules.items():
        mine = floor_of(module, floors)
        for target, line in module_imports(root, path, modules):
            theirs = floor_of(target, floors)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"{path.relative_to(root)}:{line} {module} ({floors[mine][0]}) imports "
                                f"{target} ({floors[theirs][0]})")
    return sorted(problems)


def import_circles(root: Path, packages: Iterable[str] = ("fedhh", "strategies", "simulations")) -> list[list[str]]:
    """Every group of modules that import one another round a circle (strongly connected components)."""
    modules = modules_of(root, packages)
    edges = {module: {target for target, _ in module_imports(root, path, modules)} for module, path in modules.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    counter = itertools.count()

    def visit(module: str) -> None:  # Tarjan's algorithm
        order[module] = low[module] = next(counter)
        stack.append(module)
        for target in edges[module]:
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(modules)))
    try:
        for module in modules:
            if module not in order:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(circles)


def test_every_fedhh_import_points_down_its_floors() -> None:
    assert upward_floor_imports(ROOT) == []


def test_no_module_imports_itself_back_through_others() -> None:
    assert import_circles(ROOT) == []


def test_the_floor_and_circle_checks_can_fail(tmp_path: Path) -> None:
    """A kernel that imports a protocol (even inside a function), a module outside every floor, and
    two modules that import each other are all reported."""
    kernels, protocols = tmp_path / "fedhh" / "kernels", tmp_path / "fedhh" / "protocols"
    for folder in (kernels, protocols):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    (tmp_path / "fedhh" / "__init__.py").write_text("")
    (kernels / "bits.py").write_text("def late():\n    from ..protocols.spec import ProtocolSpec\n")
    (protocols / "spec.py").write_text("from . import registry\n")
    (protocols / "registry.py").write_text("from .spec import ProtocolSpec\n")
    (tmp_path / "fedhh" / "stray.py").write_text("import os\n")
    assert upward_floor_imports(tmp_path) == [
        "fedhh.stray has no floor",
        "fedhh/kernels/bits.py:2 fedhh.kernels.bits (kernels) imports fedhh.protocols.spec (protocols)",
    ]
    assert import_circles(tmp_path) == [["fedhh.protocols.registry", "fedhh.protocols.spec"]]
