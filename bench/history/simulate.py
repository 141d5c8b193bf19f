"""The false-alarm / detection experiment of the research (nightly.md section 3.2), re-run on the real judge.

One synthetic series = one case's nightly throughput: 1000 / (100 x exp(e_t)), e_t AR(1) with
phi = 0.3 and marginal SD = cv; with probability 0.03 a night is slowed by x U(1.10, 1.50) (a
thermal or neighbour hiccup). A slowdown of ``step`` starts at night ``step_at`` (2/3 of the
nights). The series go through ``judge_testbed`` night by night, exactly as stored nights do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.history.detect import judge_testbed
from bench.history.rules import Rule, Thresholds


def series(n_series: int, nights: int, cv: float, step: float, step_at: int, seed: int) -> np.ndarray:
    """(n_series, nights) nightly throughputs of the model above."""
    rng = np.random.default_rng(seed)
    phi = 0.3
    e = np.zeros((n_series, nights))
    e[:, 0] = rng.normal(0, cv, n_series)
    innov = cv * np.sqrt(1 - phi**2)
    for t in range(1, nights):
        e[:, t] = phi * e[:, t - 1] + rng.normal(0, innov, n_series)
    time = 100 * np.exp(e)
    hiccup = rng.random((n_series, nights)) < 0.03
    time = np.where(hiccup, time * rng.uniform(1.10, 1.50, (n_series, nights)), time)
    time[:, step_at:] *= 1 + step
    return 1000.0 / time


def nights_of(values: np.ndarray, fingerprint_hash: str = "sim") -> list[dict]:
    """Night summaries (one case per series) for the judge."""
    out = []
    for t in range(values.shape[1]):
        cases = {
            f"s{i:04d}": {"status": "ok", "value": float(values[i, t]), "direction": "higher"}
            for i in range(values.shape[0])
        }
        out.append(
            {
                "night_id": f"n{t:04d}",
                "date_utc": f"night {t:04d}",
                "fingerprint_hash": fingerprint_hash,
                "status": "complete",
                "cases": cases,
            }
        )
    return out


@dataclass(frozen=True)
class Cell:
    """One cell of the experiment."""

    cv: float
    step: float
    series: int
    nights: int
    ever_alerted: float  # share of series with a confirmed alert before the step (A/A part)
    alerts_per_100: float  # confirmed alert onsets per 100 series-nights before the step
    caught: float | None  # share of series whose step was confirmed within 14 nights (None: no step)
    median_delay: float | None  # nights after the first slow night (0 = on it)


def run(cv: float, step: float, n_series: int = 200, nights: int = 60, seed: int = 0, rule: Rule | None = None) -> Cell:
    """Simulate and judge; the A/A figures come from the nights before the step."""
    step_at = nights * 2 // 3 if step else nights
    vals = series(n_series, nights, cv, step, step_at, seed)
    verdict = judge_testbed("sim", nights_of(vals), Thresholds(rule or Rule()), [])
    ever = onsets = judged = 0
    caught, delays = 0, []
    for c in verdict.cases.values():
        states = [p.state for p in c.points]
        before = states[:step_at]
        judged += sum(1 for s in before if s != "insufficient")
        o = sum(1 for i, s in enumerate(before) if s == "confirmed" and (i == 0 or before[i - 1] != "confirmed"))
        onsets += o
        ever += o > 0
        if step:
            hit = next((i for i in range(step_at, min(nights, step_at + 15)) if states[i] == "confirmed"), None)
            if hit is not None:
                caught += 1
                delays.append(hit - step_at)
    return Cell(
        cv=cv,
        step=step,
        series=n_series,
        nights=nights,
        ever_alerted=ever / n_series,
        alerts_per_100=100 * onsets / judged if judged else 0.0,
        caught=caught / n_series if step else None,
        median_delay=float(np.median(delays)) if delays else None,
    )


def table(cells: list[Cell]) -> list[list[str]]:
    """Rows for printing."""
    return [
        [
            f"{c.cv:.0%}",
            f"{c.step:.0%}" if c.step else "none (A/A)",
            f"{c.ever_alerted:.1%}",
            f"{c.alerts_per_100:.2f}",
            "-" if c.caught is None else f"{c.caught:.0%}",
            "-" if c.median_delay is None else f"{c.median_delay:g}",
        ]
        for c in cells
    ]


HEADERS = [
    "night-to-night noise",
    "planted slowdown",
    "series falsely alerted before it",
    "false alerts / 100 case-nights",
    "slowdown confirmed within 14 nights",
    "median delay (nights after the first slow one)",
]
