"""Intervals for failure rates and their differences, for the playbook holdout experiments and the
demo's fleet comparison. Pure stdlib (no numpy/scipy), so the request path and every job can use it.

- :func:`wilson`: Wilson (1927) score interval for one proportion (Newcombe 1998a, method 3).
- :func:`newcombe`: Newcombe (1998b) method 10, the hybrid score interval for p_holdout − p_treatment.
- :func:`design_effect`: how much clustering by key inflates the binomial variance; divide x and n by
  it before the two above (Rao and Scott 1992), so they accept non-integer counts.
- :func:`mh_risk_difference`: the Mantel–Haenszel pooled risk difference over strata (entries).

Conventions (every function): counts may be floats (design-effect-adjusted); an empty sample
(n = 0) knows nothing, so its interval is the whole range; invalid input (negative or non-finite
counts, x > n, z ≤ 0) raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.96
"""The standard normal quantile of a two-sided 95 % interval, as the papers' tables use it."""


def wilson(x: float, n: float, z: float = Z95) -> tuple[float, float]:
    """``(low, high)``: the Wilson score interval for ``x`` events in ``n`` trials, without
    continuity correction. Unlike the Wald interval it stays inside [0, 1] and keeps a positive
    width at x = 0 and x = n, the cells a small arm produces. ``n = 0`` gives (0, 1)."""
    _check_count(x, n)
    _check_z(z)
    if n == 0:
        return 0.0, 1.0
    p = x / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denominator
    half = z * math.sqrt(max(p * (1.0 - p) / n + z2 / (4.0 * n * n), 0.0)) / denominator
    # The closed form puts the limits at exactly 0 / 1 for x = 0 / x = n only up to rounding.
    low = 0.0 if x == 0 else max(0.0, centre - half)
    high = 1.0 if x == n else min(1.0, centre + half)
    return low, high


def newcombe(x_h: float, n_h: float, x_t: float, n_t: float, z: float = Z95) -> tuple[float, float, float]:
    """``(delta, low, high)`` for delta = p_holdout − p_treatment (positive: the entry helps), by
    Newcombe's hybrid score method (1998, method 10): each limit adds in quadrature the distances
    from each rate to the relevant limit of its own Wilson interval. Swapping the arms negates
    delta and mirrors the interval. When either arm is empty there is no difference to estimate:
    ``(0.0, -1.0, 1.0)``."""
    _check_count(x_h, n_h)
    _check_count(x_t, n_t)
    _check_z(z)
    if n_h == 0 or n_t == 0:
        return 0.0, -1.0, 1.0
    p_h, p_t = x_h / n_h, x_t / n_t
    low_h, high_h = wilson(x_h, n_h, z)
    low_t, high_t = wilson(x_t, n_t, z)
    delta = p_h - p_t
    low = delta - math.sqrt((p_h - low_h) ** 2 + (high_t - p_t) ** 2)
    high = delta + math.sqrt((high_h - p_h) ** 2 + (p_t - low_t) ** 2)
    return delta, max(-1.0, low), min(1.0, high)


def design_effect(units: Sequence[tuple[float, float]]) -> float:
    """The variance inflation of a failure rate whose ops come in clusters (one per key), from
    ``(n_i, x_i)`` = (ops, failures) per key: ``1 + (m − 1)·ICC``, clipped to ``[1, m]``.

    - ``m = Σn_i² / Σn_i`` is the op-weighted mean cluster size (Kish), the size that enters the
      variance of a pooled rate when clusters differ in size; it is 1 when every key has one op.
    - ``ICC`` is the one-way ANOVA estimator for binary data (Fleiss; Ridout, Demétrio and Firth
      1999): ``(MSB − MSW) / (MSB + (n₀ − 1)·MSW)`` with ``n₀ = (N − Σn_i²/N) / (k − 1)``.

    Why this estimator: it needs no iteration, is defined for any cluster sizes, is exactly 1 for
    singleton clusters (m = 1) and for keys with identical rates (MSB = 0, ICC ≤ 0), and never
    exceeds m (ICC ≤ 1) — unlike the ratio of the cluster-robust to the binomial variance, which
    is not 1 for singletons and is unbounded with two or three keys. Negative ICC (keys more alike
    than chance) is clipped to 0: a design effect below 1 would claim more precision than the ops
    give, and with the 2–3 keys per arm of a small fleet that would be noise. Fewer than two keys,
    or no ops at all, give 1.0 (nothing to estimate from)."""
    clusters = [(float(n), float(x)) for n, x in units if n > 0]
    for n, x in clusters:
        _check_count(x, n)
    k = len(clusters)
    total = sum(n for n, _ in clusters)
    if k < 2 or total <= k:
        return 1.0  # one key, or every key one op: no within-key correlation to see
    events = sum(x for _, x in clusters)
    between_ss = sum(x * x / n for n, x in clusters) - events * events / total
    within_ss = events - sum(x * x / n for n, x in clusters)
    msb = max(between_ss, 0.0) / (k - 1)
    msw = max(within_ss, 0.0) / (total - k)
    squares = sum(n * n for n, _ in clusters)
    n0 = (total - squares / total) / (k - 1)
    denominator = msb + (n0 - 1.0) * msw
    if denominator <= 0.0:
        return 1.0  # every key all-success or all-failure at the same rate: no between-key spread
    icc = min(1.0, max(0.0, (msb - msw) / denominator))
    m = squares / total
    return max(1.0, 1.0 + (m - 1.0) * icc)


def mh_risk_difference(arms: Sequence[tuple[float, float, float, float]]) -> float:
    """The Mantel–Haenszel pooled risk difference p_holdout − p_treatment over strata given as
    ``(x_h, n_h, x_t, n_t)``: ``Σ w_i·Δ_i / Σ w_i`` with ``w_i = n_h·n_t / (n_h + n_t)``, the weights
    that are efficient when the difference is common to the strata (Greenland and Robins 1985).
    One stratum gives its plain difference; a stratum with an empty arm weighs nothing; with no
    weight at all the result is 0.0."""
    weighted = weights = 0.0
    for x_h, n_h, x_t, n_t in arms:
        _check_count(x_h, n_h)
        _check_count(x_t, n_t)
        if n_h == 0 or n_t == 0:
            continue
        weight = n_h * n_t / (n_h + n_t)
        weighted += weight * (x_h / n_h - x_t / n_t)
        weights += weight
    return weighted / weights if weights > 0 else 0.0


def _check_count(x: float, n: float) -> None:
    """Events and trials must be finite with 0 ≤ x ≤ n (a caller's bug otherwise, not data)."""
    if not (math.isfinite(x) and math.isfinite(n)) or n < 0 or x < 0 or x > n:
        raise ValueError(f"need finite counts with 0 <= x <= n, got x={x!r}, n={n!r}")


def _check_z(z: float) -> None:
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"need a finite z > 0, got {z!r}")
