"""fedhh's shuffle bound against the values its authors' reference implementation publishes.

Feldman, McMillan and Talwar published the numerical bound of "Hiding Among the Clones" (FOCS 2021,
Theorem 3.2, arXiv 2012.12803 Appendix E) as ``computeamplification.py`` in
github.com/apple/ml-shuffling-amplification (commit 993d285a546114bf8c70c33d053dca322a755707, the
repository's newest).  Its ``numericalanalysis(n, ε0, δ, num_iterations, step, upperbound)`` brackets
the bound's ε:

* ``upperbound=False`` sums ``D_{e^ε}`` of the clones pair over the values of ``C ~ Bin(n-1, e^-ε0)``
  outward from the mean until the mass left is below the δ summed so far, and drops the rest: a
  δ no larger than the bound's, so an ε no larger (``LOWER``);
* ``upperbound=True`` charges that remaining mass in full: a δ up to twice the bound's (``UPPER``);
* both bisect ε over ``[0, ε_max]`` (``ε_max``: Theorem 3.1's closed form where it holds, else ε0)
  for ``num_iterations`` steps and return the upper end, so each is at most ``2^-num_iterations ε_max``
  above the ε its δ gives.

fedhh computes the same sum (window all but δ/1000 of C's mass, the rest charged in full; bisection to
a relative 1e-6; module docstring of ``fedhh.privacy.shuffle``), so its ε is an upper bound on the
exact numerical bound, hence at least ``LOWER - 2^-T ε_max``, and at most ``UPPER`` (up to its own
bisection's relative 1e-6: where shuffling hardly amplifies, ε0 = 6, 8 at n = 10^3 and 8 at 10^4, it returns ε0).
It is also within 0.1% of ``LOWER`` (measured: at most 5.4e-4 relative over the grid, 2.3e-4 at
δ = 1e-6), which no variant looser by the closed form's margin or by a few percent meets: ``UPPER``
itself is 2-8% above ``LOWER`` at δ = 1e-6 (17% at δ = 1e-3) where shuffling amplifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedhh.privacy.shuffle import EPSILON_TOLERANCE, analytic_epsilon, shuffled_epsilon

REFERENCE = "github.com/apple/ml-shuffling-amplification@993d285a546114bf8c70c33d053dca322a755707"
TIGHT = 1e-3  # fedhh's ε at most this far (relative) above the reference's lower bound

# README.md at REFERENCE, "Getting Started": example.py's output with n = 10^5, ε0 = 4, δ = 1e-6,
# num_iterations = 10, step = 100: "eps between 0.1675385583317841 and 0.172790550755978", and the
# closed form "at most 0.5378040242374512".
README_EXAMPLE = (4.0, 100_000, 1e-6, 0.1675385583317841, 0.172790550755978, 0.5378040242374512, 10)

# (ε0, n, δ, LOWER, UPPER, closed form or None): computeamplification.py at REFERENCE, run unmodified
# (scipy 1.17.1, numpy 2.4.6): numericalanalysis(n, ε0, δ, num_iterations=30, step=1, upperbound=False),
# the same with upperbound=True, and closedformanalysis(n, ε0, δ) where ε0 < ln(n / (16 ln(4/δ))).
ITERATIONS = 30
GRID = [
    (0.5, 1_000, 1e-6, 0.07052225480332384, 0.07378365079845785, 0.33483647172226294),
    (1.0, 1_000, 1e-6, 0.18240762100693708, 0.19024512994388598, 0.6495375524107758),
    (2.0, 1_000, 1e-6, 0.5454025380313396, 0.5627027805894613, None),
    (4.0, 1_000, 1e-6, 3.9899550303816795, 3.9944613985717297, None),
    (6.0, 1_000, 1e-6, 5.9999963734298944, 5.999997826293111, None),
    (8.0, 1_000, 1e-6, 7.9999987334012985, 7.999998912215233, None),
    (0.5, 10_000, 1e-6, 0.02040143401250214, 0.021533559877332603, 0.10468237511990537),
    (1.0, 10_000, 1e-6, 0.05300519174626192, 0.05556159207050932, 0.2332655961237434),
    (2.0, 10_000, 1e-6, 0.15504425632775065, 0.16183725752460137, 0.5235509772345485),
    (4.0, 10_000, 1e-6, 0.6008435748517513, 0.6253329142928123, None),
    (6.0, 10_000, 1e-6, 5.720915475860238, 5.855804907158017, None),
    (8.0, 10_000, 1e-6, 7.999994479119778, 7.999997086822987, None),
    (0.5, 100_000, 1e-6, 0.005812548104423212, 0.006200820010870413, 0.031914552225181435),
    (1.0, 100_000, 1e-6, 0.015282060259694322, 0.01616821697875277, 0.07529011566478624),
    (2.0, 100_000, 1e-6, 0.04502556467901639, 0.04726257675739199, 0.19057970666626542),
    (4.0, 100_000, 1e-6, 0.16976972299480453, 0.17697308111923968, 0.5378040242374512),
    (6.0, 100_000, 1e-6, 0.5241439658119879, 0.5437697056100397, 1.100876195994581),
    (8.0, 100_000, 1e-6, 2.1881438717246056, 2.3572910130023956, None),
    (0.5, 1_000_000, 1e-6, 0.0016190941694995441, 0.0017530119804650746, 0.009907981245890558),
    (1.0, 1_000_000, 1e-6, 0.00433451936026575, 0.0046370118371077415, 0.023806402804371914),
    (2.0, 1_000_000, 1e-6, 0.01295836874928901, 0.01372712928265225, 0.06318775549809852),
    (4.0, 1_000_000, 1e-6, 0.04930706528128273, 0.05175650558638326, 0.20160146475304283),
    (6.0, 1_000_000, 1e-6, 0.14929073805200194, 0.155857318807044, 0.48686838676636834),
    (8.0, 1_000_000, 1e-6, 0.4444441683269157, 0.4616299832194454, 1.002857100058887),
    (1.0, 1_000, 1e-3, 0.08023202742559689, 0.09347907499216652, 0.5087976890172154),
    (2.0, 1_000, 1e-4, 0.3794281408190727, 0.4038632605224848, None),
    (1.0, 10_000, 1e-8, 0.06888039934185855, 0.07096247259564271, 0.26422994449844434),
    (4.0, 10_000, 1e-8, 0.7546151243150234, 0.7711735852062702, None),
    (4.0, 100_000, 1e-8, 0.21492736290311365, 0.2209963421921563, 0.5949140247283182),
    (2.0, 100_000, 1e-10, 0.07019010561293285, 0.07174518476984976, 0.23689642160002372),
    (8.0, 100_000, 1e-10, 7.998069882392883, 7.99885681271553, None),
]


def check(
    epsilon0: float, n_users: int, delta: float, lower: float, upper: float, closed: float | None, iterations: int
) -> float:
    """fedhh's ε, after checking it against one published row."""
    epsilon = shuffled_epsilon(epsilon0, n_users, delta)
    resolution = 2.0**-iterations * (closed if closed is not None else epsilon0)
    assert lower - resolution <= epsilon <= upper + EPSILON_TOLERANCE * epsilon  # fedhh's bisection: to 1e-6
    assert analytic_epsilon(epsilon0, n_users, delta) == (None if closed is None else pytest.approx(closed, rel=1e-12))
    return epsilon


def test_the_readme_example() -> None:
    check(*README_EXAMPLE)


@pytest.mark.parametrize(("epsilon0", "n_users", "delta", "lower", "upper", "closed"), GRID)
def test_the_reference_implementation_grid(
    epsilon0: float, n_users: int, delta: float, lower: float, upper: float, closed: float | None
) -> None:
    epsilon = check(epsilon0, n_users, delta, lower, upper, closed, ITERATIONS)
    assert epsilon <= lower * (1 + TIGHT)


def test_the_window_rejects_the_closed_form_and_a_few_percent() -> None:
    """The checks above would catch fedhh returning the closed form, or an ε 2% above or below."""
    for epsilon0, n_users, delta, lower, upper, closed in GRID:
        resolution = 2.0**-ITERATIONS * (closed if closed is not None else epsilon0)
        window = (lower - resolution, min(upper * (1 + EPSILON_TOLERANCE), lower * (1 + TIGHT)))
        epsilon = shuffled_epsilon(epsilon0, n_users, delta)
        if epsilon < 0.99 * epsilon0:  # amplified: ε0 itself, the most a bound can say, is not in the window
            assert not window[0] <= epsilon * 1.02 <= window[1]
            assert not window[0] <= epsilon * 0.98 <= window[1]
        if closed is not None:
            assert closed > window[1]


def test_the_table_docs_privacy_states() -> None:
    """docs/privacy.md's table of published values, "The shuffle model", shows rows of GRID, rounded."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "privacy.md").read_text(encoding="utf-8")
    table = text.split("| ε0 | n | δ | reference, lower end | reference, upper end | fedhh |")[1].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()[1:]]
    published = {(row[0], row[1], row[2]): row[3:5] for row in GRID}
    assert len(rows) >= 6
    for epsilon0, n_users, delta, lower, upper, fedhh in rows:
        key = (float(epsilon0), int(number(n_users)), number(delta))
        assert [lower, upper] == [f"{value:.4g}" for value in published[key]]
        assert fedhh == f"{shuffled_epsilon(*key):.4g}"


def number(text: str) -> float:
    """``10⁶`` or ``10⁻⁶`` as a number."""
    base, exponent = text[:2], text[2:].translate(str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-"))
    assert base == "10", text
    return 10.0 ** int(exponent)
