"""Closed-loop load: `concurrency` tasks, each starting its next operation as soon as
its last one ends, until a count or a duration is reached.

An operation is an async callable that measures itself and returns its sample
(a latency, or a tuple such as time-to-first-token, time-to-last-token and event
counts); failures are counted, and the first one is kept to explain it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

Op = Callable[[], Awaitable[Any]]


class Totals:
    """Takes the place of the sample list where only counts and sums are reported: the
    number of samples and their element-wise sums. The soak's ~270,000 samples, kept,
    would grow the benchmark process by ~20 MiB and pass for the trunkline client's."""

    def __init__(self) -> None:
        self.n = 0
        self.sums: list[float] = []

    def append(self, sample: Any) -> None:
        values = sample if isinstance(sample, tuple) else (sample,)
        if self.sums:
            for i, v in enumerate(values):
                self.sums[i] += v
        else:
            self.sums = list(values)
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def sum(self, index: int = 0) -> float:
        return self.sums[index] if self.sums else 0


@dataclass
class LoadResult:
    samples: list[Any] | Totals = field(default_factory=list)
    wall_s: float = 0.0
    errors: int = 0
    first_error: str | None = None


async def closed_loop(
    op: Op, concurrency: int, *, count: int, duration_s: float, warmup: int = 0, samples: Totals | None = None
) -> LoadResult:
    """Run `op` with `concurrency` in flight; stop after `count` operations or once
    `duration_s` has passed (operations already started still finish). Every sample
    is kept in a list, unless `samples` is a `Totals` to add them to instead."""
    if warmup:
        # Untimed: fills connection pools, imports lazily loaded code, warms caches.
        await closed_loop(op, min(concurrency, warmup), count=warmup, duration_s=duration_s)
    result = LoadResult([] if samples is None else samples)
    started = 0
    deadline = time.perf_counter() + duration_s

    async def one_task() -> None:
        nonlocal started
        while started < count and time.perf_counter() < deadline:
            started += 1
            try:
                result.samples.append(await op())
            except Exception as exc:  # noqa: BLE001 - a failed request is a number in the report
                result.errors += 1
                if result.first_error is None:
                    result.first_error = f"{type(exc).__name__}: {exc}"[:300]

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(one_task)
    result.wall_s = time.perf_counter() - t0
    return result
