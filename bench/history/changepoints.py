"""Change points for the trend charts: E-divisive means with a permutation test (MongoDB's method).

Retrospective markers, not alerts: drawn and listed, never paged on. The permutation test uses
a fixed seed so a page rebuilt from the same history shows the same markers. A split needs
p < ``pvalue`` and segment medians at least ``min_shift`` apart (relative).
"""

from __future__ import annotations

import numpy as np


def _q_all(x: np.ndarray, m: int) -> np.ndarray:
    """E-divisive statistic q(t) for every split t in [m, n - m] of x (prefix sums of |xi - xj|)."""
    n = x.size
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    t = np.arange(m, n - m + 1)
    n1, n2 = t.astype(float), (n - t).astype(float)
    within1 = p[t, t]
    within2 = p[n, n] - p[t, n] - p[n, t] + p[t, t]
    cross = p[t, n] - p[t, t]
    a = cross / (n1 * n2)
    b = within1 / (n1 * (n1 - 1))
    c = within2 / (n2 * (n2 - 1))
    return n1 * n2 / (n1 + n2) * (2 * a - b - c)


def best_split(x: np.ndarray, m: int = 3) -> tuple[int, float] | None:
    """(t, q) of the strongest split of x, or None when x is too short for two segments of m."""
    if x.size < 2 * m:
        return None
    q = _q_all(x, m)
    i = int(np.argmax(q))
    return m + i, float(q[i])


def _significance(x: np.ndarray, q: float, m: int, permutations: int, rng: np.random.Generator) -> float:
    hits = 0
    for _ in range(permutations):
        if float(np.max(_q_all(rng.permutation(x), m))) >= q:
            hits += 1
    return (hits + 1) / (permutations + 1)


def change_points(
    values: list[float] | np.ndarray,
    pvalue: float = 0.01,
    permutations: int = 100,
    min_size: int = 3,
    min_shift: float = 0.03,
    seed: int = 0,
) -> list[int]:
    """Indices where a new segment starts (sorted), by recursive binary E-divisive segmentation."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    found: list[int] = []

    def recurse(s: int, e: int) -> None:
        seg = x[s:e]
        split = best_split(seg, min_size)
        if split is None:
            return
        t, q = split
        left, right = np.median(seg[:t]), np.median(seg[t:])
        if abs(right - left) < min_shift * abs(left):
            return
        if _significance(seg, q, min_size, permutations, rng) >= pvalue:
            return
        found.append(s + t)
        recurse(s, s + t)
        recurse(s + t, e)

    recurse(0, x.size)
    return sorted(found)
