"""Intervals for the holdout experiments: Wilson and Newcombe against published worked examples, the
edge cases a small arm produces, symmetry and monotonicity, the design effect of clustered ops and
the Mantel–Haenszel pooled difference.

Sources of the published values (4 decimals, z = 1.96):
- Newcombe RG, "Two-sided confidence intervals for the single proportion: comparison of seven
  methods", Stat Med 17:857–872 (1998), Table I, method 3 (Wilson score). 81/263 and 15/148 are
  also pinned by the R package propint's tests (m-Py/propint, "results reported in Newcombe1998").
- Newcombe RG, "Interval estimation for the difference between independent proportions: comparison
  of eleven methods", Stat Med 17:873–890 (1998), Table II, method 10. Examples (a) 56/70 − 48/80
  and (b) 9/10 − 3/10 are also pinned by propint's tests; the others are the same table's method 10
  column (the boundary examples: zero and full numerators).
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from opslake import analysis
from opslake.analysis.intervals import design_effect, mh_risk_difference, newcombe, wilson

# (x, n, low, high): Newcombe 1998a, Table I, method 3.
WILSON_PUBLISHED = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
]

# (x1, n1, x2, n2, delta, low, high) for p1 − p2: Newcombe 1998b, Table II, method 10.
NEWCOMBE_PUBLISHED = [
    (56, 70, 48, 80, 0.2000, 0.0524, 0.3339),
    (9, 10, 3, 10, 0.6000, 0.1705, 0.8090),
    (5, 56, 0, 29, 0.0893, -0.0381, 0.1926),
    (0, 10, 0, 20, 0.0000, -0.1611, 0.2775),
    (0, 10, 0, 10, 0.0000, -0.2775, 0.2775),
    (10, 10, 0, 20, 1.0000, 0.6791, 1.0000),
    (10, 10, 0, 10, 1.0000, 0.6075, 1.0000),
]


@pytest.mark.parametrize(("x", "n", "low", "high"), WILSON_PUBLISHED)
def test_wilson_matches_the_published_examples(x: int, n: int, low: float, high: float) -> None:
    assert wilson(x, n) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize(("x1", "n1", "x2", "n2", "delta", "low", "high"), NEWCOMBE_PUBLISHED)
def test_newcombe_matches_the_published_examples(
    x1: int, n1: int, x2: int, n2: int, delta: float, low: float, high: float
) -> None:
    assert newcombe(x1, n1, x2, n2) == pytest.approx((delta, low, high), abs=5e-5)


@pytest.mark.parametrize("z", [1.0, 1.6449, 1.96, 2.5758, 3.2905])
@pytest.mark.parametrize(("x", "n"), [(1, 7), (81, 263), (15, 148), (2.5, 9.25)])
def test_wilson_limits_invert_the_score_test_at_any_z(x: float, n: float, z: float) -> None:
    """Wilson's definition: each interior limit p solves (x/n − p)² = z²·p(1 − p)/n."""
    for limit in wilson(x, n, z):
        assert (x / n - limit) ** 2 == pytest.approx(z * z * limit * (1 - limit) / n, rel=1e-9)


def test_a_larger_z_gives_a_wider_interval() -> None:
    widths = [high - low for low, high in (wilson(15, 148, z) for z in (1.0, 1.96, 2.5758))]
    assert widths == sorted(widths) and widths[0] < widths[-1]
    deltas = [newcombe(56, 70, 48, 80, z) for z in (1.0, 1.96, 2.5758)]
    assert [d for d, _, _ in deltas] == pytest.approx([0.2] * 3)
    assert deltas[0][1] > deltas[1][1] > deltas[2][1] and deltas[0][2] < deltas[1][2] < deltas[2][2]


def test_an_empty_sample_knows_nothing() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    assert newcombe(0, 0, 3, 10) == (0.0, -1.0, 1.0)
    assert newcombe(3, 10, 0, 0) == (0.0, -1.0, 1.0)
    assert newcombe(0, 0, 0, 0, z=2.5758) == (0.0, -1.0, 1.0)


def test_zero_and_full_numerators_reach_the_boundary_exactly() -> None:
    """x = 0 puts the lower limit at exactly 0 and x = n the upper at exactly 1 (no rounding dust),
    with a positive width on the other side, unlike a Wald interval."""
    for n in (1, 3, 7, 20, 263, 10_000):
        low, high = wilson(0, n)
        assert low == 0.0 and 0.0 < high < 1.0
        low, high = wilson(n, n)
        assert high == 1.0 and 0.0 < low < 1.0
        assert wilson(0, n) == pytest.approx(tuple(1 - v for v in reversed(wilson(n, n))))
    assert wilson(0, 20) == (0.0, pytest.approx(1.96**2 / (20 + 1.96**2)))  # closed form at x = 0


def test_non_integer_counts_are_the_integer_ones_with_a_larger_z() -> None:
    """Design-effect-adjusted counts x/d of n/d equal the raw counts at z·√d (the variance is d times
    the binomial one), so the interval widens, around the same rate."""
    d = 1.7
    assert wilson(12 / d, 40 / d) == pytest.approx(wilson(12, 40, 1.96 * math.sqrt(d)), rel=1e-12)
    raw_low, raw_high = wilson(12, 40)
    low, high = wilson(12 / d, 40 / d)
    assert low < raw_low and high > raw_high
    delta, low, high = newcombe(9 / d, 30 / d, 3 / d, 31 / d)
    raw = newcombe(9, 30, 3, 31)
    assert delta == pytest.approx(raw[0]) and low < raw[1] and high > raw[2]
    assert newcombe(2.5, 7.5, 0.5, 8.25)[0] == pytest.approx(2.5 / 7.5 - 0.5 / 8.25)


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"),
    [(row[0], row[1], row[2], row[3]) for row in NEWCOMBE_PUBLISHED] + [(3, 11, 8, 13)],
)
def test_swapping_the_arms_negates_delta_and_mirrors_the_interval(x1: int, n1: int, x2: int, n2: int) -> None:
    delta, low, high = newcombe(x1, n1, x2, n2)
    assert newcombe(x2, n2, x1, n1) == pytest.approx((-delta, -high, -low), abs=1e-15)
    assert low <= delta <= high


def test_more_data_at_the_same_rates_gives_a_narrower_interval() -> None:
    wilson_widths = [high - low for low, high in (wilson(3 * k, 10 * k) for k in (1, 2, 5, 10, 100))]
    assert all(a > b for a, b in pairwise(wilson_widths))
    newcombe_widths = [
        high - low for _, low, high in (newcombe(3 * k, 10 * k, k, 10 * k) for k in (1, 2, 5, 10, 100))
    ]
    assert all(a > b for a, b in pairwise(newcombe_widths))
    # One arm growing alone also narrows it.
    assert (
        newcombe(3, 10, 1, 100)[2] - newcombe(3, 10, 1, 100)[1]
        < newcombe(3, 10, 1, 10)[2] - newcombe(3, 10, 1, 10)[1]
    )


@pytest.mark.parametrize(
    "bad",
    [(-1, 10), (11, 10), (1, -1), (math.nan, 10), (1, math.inf)],
)
def test_impossible_counts_are_a_callers_bug(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="0 <= x <= n"):
        wilson(*bad)
    with pytest.raises(ValueError, match="0 <= x <= n"):
        newcombe(*bad, 1, 2)
    with pytest.raises(ValueError, match="0 <= x <= n"):
        mh_risk_difference([(*bad, 1, 2)])


@pytest.mark.parametrize("z", [0.0, -1.96, math.nan])
def test_z_must_be_positive(z: float) -> None:
    with pytest.raises(ValueError, match="z > 0"):
        wilson(1, 2, z)
    with pytest.raises(ValueError, match="z > 0"):
        newcombe(1, 2, 1, 2, z)


def test_design_effect_is_one_without_clustering() -> None:
    assert design_effect([(1, 0), (1, 1), (1, 0), (1, 1), (1, 1)]) == 1.0  # every key one op
    assert design_effect([(10, 3), (10, 3), (10, 3)]) == 1.0  # keys with identical rates
    assert design_effect([(20, 5), (40, 10), (8, 2)]) == 1.0  # same rate, different sizes
    assert design_effect([(30, 12)]) == 1.0  # one key: nothing to compare
    assert design_effect([]) == 1.0
    assert design_effect([(0, 0), (0, 0)]) == 1.0
    assert design_effect([(10, 0), (10, 0)]) == 1.0  # no failures anywhere
    assert design_effect([(10, 10), (10, 10), (5, 5)]) == 1.0  # all failures everywhere


def test_design_effect_grows_with_heterogeneous_keys() -> None:
    # Worked by hand: N = 12, k = 3, MSB = 1, MSW = 1/9, n0 = 4 → ICC = 2/3; m = 48/12 = 4 → 1 + 3·2/3.
    assert design_effect([(4, 0), (4, 4), (4, 2)]) == pytest.approx(3.0)
    # Keys that always fail or always succeed: ICC = 1, so the key size is the whole effect (m = 10).
    assert design_effect([(10, 0), (10, 10)]) == pytest.approx(10.0)
    mild = design_effect([(50, 10), (50, 14), (50, 12)])
    strong = design_effect([(50, 2), (50, 25), (50, 12)])
    assert 1.0 <= mild < strong <= 50.0
    assert design_effect([(20, 1), (20, 15), (20, 8)]) > 1.0
    # Keys with no ops are not clusters; non-integer counts are accepted.
    assert design_effect([(4, 0), (0, 0), (4, 4), (4, 2)]) == pytest.approx(3.0)
    assert design_effect([(4.0, 0.0), (4.0, 4.0), (4.0, 2.0)]) == pytest.approx(3.0)


def test_design_effect_stays_within_one_and_the_mean_key_size() -> None:
    cases = [
        [(3, 0), (7, 7), (1, 1), (12, 5)],
        [(100, 1), (2, 2)],
        [(5, 1), (5, 2), (5, 3), (5, 4), (5, 5)],
        [(2, 1), (2, 1), (2, 1)],  # keys more alike than chance: negative ICC clipped
    ]
    for units in cases:
        m = sum(n * n for n, _ in units) / sum(n for n, _ in units)
        assert 1.0 <= design_effect(units) <= m + 1e-12


def test_mh_risk_difference_of_one_stratum_is_the_plain_difference() -> None:
    assert mh_risk_difference([(56, 70, 48, 80)]) == pytest.approx(56 / 70 - 48 / 80)
    assert mh_risk_difference([(2.5, 7.5, 0.5, 8.25)]) == pytest.approx(2.5 / 7.5 - 0.5 / 8.25)


def test_mh_risk_difference_pools_with_harmonic_weights() -> None:
    # A common difference is recovered whatever the stratum sizes.
    assert mh_risk_difference([(6, 20, 2, 20), (30, 100, 10, 100), (3, 10, 1, 10)]) == pytest.approx(0.2)
    # Weights n_h·n_t/(n_h + n_t): 10·10/20 = 5 and 90·10/100 = 9.
    pooled = mh_risk_difference([(5, 10, 0, 10), (9, 90, 1, 10)])
    assert pooled == pytest.approx((5 * 0.5 + 9 * 0.0) / (5 + 9))
    # Same thing as the Mantel–Haenszel form Σ(x_h·n_t − x_t·n_h)/N / Σ n_h·n_t/N.
    strata = [(5, 10, 0, 10), (9, 90, 1, 10), (4, 33, 7, 41)]
    mh = sum((a * d - c * b) / (b + d) for a, b, c, d in strata) / sum(
        b * d / (b + d) for _, b, _, d in strata
    )
    assert mh_risk_difference(strata) == pytest.approx(mh)
    # Swapping arms negates it.
    assert mh_risk_difference([(c, d, a, b) for a, b, c, d in strata]) == pytest.approx(-mh)


def test_mh_risk_difference_skips_strata_with_an_empty_arm() -> None:
    assert mh_risk_difference([(3, 10, 1, 10), (5, 5, 0, 0), (0, 0, 4, 4)]) == pytest.approx(0.2)
    assert mh_risk_difference([(5, 5, 0, 0)]) == 0.0
    assert mh_risk_difference([]) == 0.0


def test_the_analysis_package_exports_them_lazily() -> None:
    assert {"design_effect", "mh_risk_difference", "newcombe", "wilson"} <= set(analysis.__all__)
    assert analysis.newcombe is newcombe and analysis.wilson is wilson
