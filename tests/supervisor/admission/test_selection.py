"""The order a route's deployments are offered in: weighted shares, least busy,
priority, and deployments cooling down last. Seeded, so each run is the same."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trunkline.supervisor.admission.selection import Option, Selector, Strategy, order

THREE = [Option("a", weight=6), Option("b", weight=3), Option("c", weight=1)]


def ids(ranked: list[int], options: list[Option] = THREE) -> list[str]:
    return [options[i].id for i in ranked]


def test_weighted_draws_the_first_by_weight_and_ranks_the_rest_by_weight():
    rng = random.Random(31)
    firsts: Counter[str] = Counter()
    for _ in range(10_000):
        ranked = ids(order("weighted", THREE, rng))
        firsts[ranked[0]] += 1
        rest = ranked[1:]
        assert sorted(rest) == sorted({"a", "b", "c"} - {ranked[0]})
        assert rest == sorted(rest, key=lambda x: -next(o.weight for o in THREE if o.id == x))
    # Expected 6000 / 3000 / 1000; the sd of each is under 50, so 200 is 4 sd.
    assert abs(firsts["a"] - 6000) < 200 and abs(firsts["b"] - 3000) < 200 and abs(firsts["c"] - 1000) < 200


def test_a_lowered_share_lowers_a_deployments_draws():
    rng = random.Random(7)
    options = [Option("a"), Option("b")]
    firsts = Counter(ids(order("weighted", options, rng, share={"a": 0.1}), options)[0] for _ in range(5000))
    # a's weight is 0.1 against b's 1: about 455 of 5000 (sd 20).
    assert 350 < firsts["a"] < 560


def test_least_busy_puts_the_fewest_in_flight_first():
    rng = random.Random(1)
    assert ids(order("least_busy", THREE, rng, busy={"a": 5, "b": 1, "c": 2})) == ["b", "c", "a"]
    # Ties go to the heavier weight, then to config order.
    assert ids(order("least_busy", THREE, rng, busy={})) == ["a", "b", "c"]


def test_priority_takes_the_lowest_first_and_weights_within_a_priority():
    rng = random.Random(3)
    options = [Option("late", priority=2), Option("x", weight=1, priority=0), Option("y", weight=3, priority=0)]
    seen: Counter[str] = Counter()
    for _ in range(4000):
        ranked = ids(order("priority", options, rng), options)
        assert ranked[-1] == "late" and set(ranked[:2]) == {"x", "y"}
        seen[ranked[0]] += 1
    assert 2800 < seen["y"] < 3200  # 3:1 within priority 0 (expected 3000, sd 27)


def test_deployments_cooling_down_go_last_in_their_order():
    rng = random.Random(5)
    strategies: tuple[Strategy, ...] = ("weighted", "least_busy", "priority")
    for strategy in strategies:
        ranked = ids(order(strategy, THREE, rng, cooling={"a"}))
        assert ranked[-1] == "a"
    assert ids(order("least_busy", THREE, rng, cooling={"a", "b"})) == ["c", "a", "b"]


#: Weights and priority levels of every kind: two at level 0, two at 1, one at 2.
MIXED = [
    Option("a", weight=6),
    Option("b", weight=3, priority=1),
    Option("c", weight=1),
    Option("d", weight=2, priority=1),
    Option("e", weight=0.5, priority=2),
]


def test_no_options_no_order():
    assert order("weighted", [], random.Random(0)) == []


STRATEGIES: tuple[Strategy, ...] = ("weighted", "least_busy", "priority")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_prepared_selector_orders_as_order_does_for_the_same_draws(strategy: Strategy):
    selector = Selector(strategy, MIXED)
    ours, theirs = random.Random(11), random.Random(11)
    for n in range(2000):
        cooling = {"c"} if n % 3 == 0 else set()
        busy = {"b": 2} if n % 5 == 0 else {}
        assert selector.order(ours, busy=busy, cooling=cooling) == order(
            strategy, MIXED, theirs, busy=busy, cooling=cooling
        ), n


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_drawn_static_order_is_the_order_of_the_same_draws(strategy: Strategy):
    selector = Selector(strategy, MIXED)
    ours, theirs = random.Random(7), random.Random(7)
    seen = set()
    for n in range(2000):
        busy = {"b": 2} if strategy == "least_busy" and n % 5 == 0 else {}
        at = selector.draw(ours, busy)
        expected = order(strategy, MIXED, theirs, busy=busy)
        if at < 0:
            assert busy, n  # only least_busy with one of them in flight is not static
            continue
        assert list(selector.static[at]) == expected, n
        seen.add(at)
    assert len(seen) == len(selector.static)  # every static order is drawn


def test_too_many_orders_are_worked_out_per_request():
    many = [Option(f"p{level}x{i}", priority=level) for level in range(5) for i in range(4)]  # 4**5 combinations
    selector = Selector("priority", many)
    assert selector.static == []
    assert selector.draw(random.Random(0)) == -1
