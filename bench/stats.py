"""Small statistics for latency samples and for repeated runs of one measurement."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Summary:
    """Median and p99 of one run's samples (seconds), how many, and the run's rate."""

    n: int
    p50: float
    p99: float
    rate: float  # completed operations per second of wall time
    mean: float = math.nan
    p90: float = math.nan

    @classmethod
    def of(cls, samples: Sequence[float], wall_s: float) -> Summary:
        s = sorted(samples)
        return cls(
            n=len(s),
            p50=percentile(s, 50),
            p99=percentile(s, 99),
            rate=len(s) / wall_s if wall_s > 0 else math.nan,
            mean=sum(s) / len(s) if s else math.nan,
            p90=percentile(s, 90),
        )


@dataclass
class Spread:
    """One figure over repeated runs: the median run's value, and min/max across runs."""

    mid: float
    lo: float
    hi: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = sorted(x for x in values if not math.isnan(x))
        if not v:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(mid=v[(len(v) - 1) // 2], lo=v[0], hi=v[-1], runs=len(v))


def median(values: Sequence[float]) -> float:
    v = sorted(values)
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        return math.nan
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return math.nan
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx * 60
