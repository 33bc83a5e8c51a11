"""The order in which a route's deployments are offered to admission: pure, so a
seeded random generator makes it repeatable.

The order is a preference; the store has the last word (it skips a deployment that
is cooling down or at its limits and takes the next), and what it skips here (a
deployment this daemon knows to be cooling down) is only put last, never left out:
its cooldown may end before the request is admitted.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, product
from typing import Literal

Strategy = Literal["weighted", "least_busy", "priority"]
#: At most this many orders of one route are made at start (a priority route's levels
#: multiply them); past it, each request's order is worked out as it comes.
MAX_STATIC_ORDERS = 256


@dataclass(frozen=True, slots=True)
class Option:
    """What selection reads of a deployment: its id, configured weight and priority."""

    id: str
    weight: float = 1.0
    priority: int = 0


def order(
    strategy: Strategy,
    options: Sequence[Option],
    rng: random.Random,
    *,
    busy: Mapping[str, int] | None = None,
    cooling: frozenset[str] | set[str] = frozenset(),
    share: Mapping[str, float] | None = None,
) -> list[int]:
    """Indexes into `options`, most preferred first.

    weighted: one drawn at random by weight (times its `share`, lowered by upstream
    rate-limit headers), then the others by weight, highest first, as fallbacks.
    least_busy: fewest requests in flight (`busy`) first; ties by weight, then config
    order. priority: the lowest priority first; within one priority, weighted.
    Deployments in `cooling` go last, in the order they would have had."""
    n = len(options)
    if n == 0:
        return []
    share = share or {}
    weights = [o.weight * share.get(o.id, 1.0) for o in options]
    if strategy == "least_busy":
        counts = busy or {}
        ranked = sorted(range(n), key=lambda i: (counts.get(options[i].id, 0), -weights[i], i))
    elif strategy == "priority":
        ranked = []
        for level in sorted({o.priority for o in options}):
            ranked += _weighted([i for i in range(n) if options[i].priority == level], weights, rng)
    else:
        ranked = _weighted(list(range(n)), weights, rng)
    if cooling:
        ranked = [i for i in ranked if options[i].id not in cooling] + [i for i in ranked if options[i].id in cooling]
    return ranked


class Selector:
    """`order` for one route, with what does not change between requests worked out
    once: with no share lowered, the draw is one bisection and the order a list made
    at start (the same order, for the same random numbers, as `order` gives)."""

    __slots__ = ("_drawn", "_levels", "_static", "options", "static", "strategy")

    def __init__(self, strategy: Strategy, options: Sequence[Option]) -> None:
        self.strategy = strategy
        self.options = list(options)
        n = len(self.options)
        weights = [o.weight for o in self.options]
        groups = (
            [
                [i for i in range(n) if self.options[i].priority == level]
                for level in sorted({o.priority for o in self.options})
            ]
            if strategy == "priority"
            else [list(range(n))]
        )
        #: Per group (a priority level; all the options otherwise): (indexes, cumulative
        #: weights, the group's order for each first drawn).
        self._levels: list[tuple[list[int], list[float], list[list[int]]]] = []
        for group in groups:
            cumulative, total = [], 0.0
            for i in group:
                total += weights[i]
                cumulative.append(total)
            orders = [[i, *sorted((j for j in group if j != i), key=lambda j: (-weights[j], j))] for i in group]
            self._levels.append((group, cumulative, orders))
        #: least_busy with nothing in flight: by weight, then config order.
        self._static = sorted(range(n), key=lambda i: (-weights[i], i))
        #: Every order `draw` can pick, made at start (least_busy: the one above; else
        #: one per combination of the firsts drawn in each level, while they are few).
        self.static: list[tuple[int, ...]] = []
        if strategy == "least_busy":
            self.static = [tuple(self._static)]
        elif math.prod(len(group) for group, _, _ in self._levels) <= MAX_STATIC_ORDERS:
            self.static = [
                tuple(chain.from_iterable(combo)) for combo in product(*(orders for _, _, orders in self._levels))
            ]
        #: The cumulative weights of the one level drawn from, when only one is (most
        #: routes): `draw` is then one bisection.
        drawn = [cumulative for group, cumulative, _ in self._levels if len(group) > 1]
        self._drawn = drawn[0] if len(drawn) == 1 and self.static else None

    def draw(self, rng: random.Random, busy: Mapping[str, int] | None = None) -> int:
        """The index in `static` of the order `order` would give with no deployment
        cooling down and no share lowered (the same random numbers drawn), or -1 when it
        is not one of them (least_busy with some of them in flight; too many orders)."""
        if self.strategy == "least_busy":
            return -1 if busy and any(o.id in busy for o in self.options) else 0
        cumulative = self._drawn
        if cumulative is not None:
            at = bisect_right(cumulative, rng.random() * cumulative[-1])
            return at if at < len(cumulative) else len(cumulative) - 1
        if not self.static:
            return -1
        at = 0
        for group, cumulative, _ in self._levels:
            size = len(group)
            if size > 1:
                drawn = bisect_right(cumulative, rng.random() * cumulative[-1])
                at = at * size + (drawn if drawn < size else size - 1)
        return at

    def order(
        self,
        rng: random.Random,
        *,
        busy: Mapping[str, int] | None = None,
        cooling: frozenset[str] | set[str] = frozenset(),
        share: Mapping[str, float] | None = None,
    ) -> list[int]:
        if share or (self.strategy == "least_busy" and busy and any(o.id in busy for o in self.options)):
            return order(self.strategy, self.options, rng, busy=busy, cooling=cooling, share=share)
        if self.strategy == "least_busy":
            ranked = list(self._static)
        else:
            ranked = []
            for group, cumulative, orders in self._levels:
                if len(group) == 1:
                    ranked += group
                    continue
                at = bisect_right(cumulative, rng.random() * cumulative[-1])
                ranked += orders[min(at, len(group) - 1)]
        if cooling:
            options = self.options
            return [i for i in ranked if options[i].id not in cooling] + [i for i in ranked if options[i].id in cooling]
        return ranked


def _weighted(indexes: list[int], weights: list[float], rng: random.Random) -> list[int]:
    """One of `indexes` drawn by weight, then the rest by weight (highest first)."""
    if len(indexes) <= 1:
        return indexes
    total = sum(weights[i] for i in indexes)
    first = indexes[0]
    if total > 0:
        point = rng.random() * total
        for i in indexes:
            point -= weights[i]
            if point < 0:
                first = i
                break
        else:  # rounding left the point at the very end
            first = indexes[-1]
    rest = sorted((i for i in indexes if i != first), key=lambda i: (-weights[i], i))
    return [first, *rest]
