"""A request's `Route`: events handed on in `seq` order whatever order they arrive in,
and `ready()`, which takes what has already arrived without waiting (the front door
writes a burst of events in one go)."""

from __future__ import annotations

import trio
import trio.testing

from trunkline.protocol.messages import ErrorInfo, Finish, Response, TextDelta
from trunkline.routing import Route


def make_route() -> tuple[Route, dict[str, Route], list[Route]]:
    table: dict[str, Route] = {}
    gaps: list[Route] = []
    route = Route("r1", table, gaps.append)
    table["r1"] = route
    return route, table, gaps


def delta(seq: int) -> TextDelta:
    return TextDelta(request_id="r1", seq=seq, text=f"w{seq}")


def test_ready_takes_what_arrived_in_order_and_leaves_nothing_behind():
    route, _, _ = make_route()
    assert route.ready() == []
    for seq in (0, 1, 2):
        route.deliver(delta(seq))
    assert [ev.seq for ev in route.ready()] == [0, 1, 2]
    assert route.ready() == [] and not route.done


def test_an_early_event_waits_for_the_gap_and_then_comes_in_order():
    route, _, gaps = make_route()
    route.deliver(delta(0))
    route.deliver(delta(2))  # 1 is missing: held back, and the connection told of the gap
    assert [ev.seq for ev in route.ready()] == [0]
    assert gaps == [route]
    route.deliver(delta(1))
    assert [ev.seq for ev in route.ready()] == [1, 2]


def test_the_terminal_event_ends_the_route_and_leaves_the_table():
    route, table, _ = make_route()
    route.deliver(delta(0))
    route.deliver(Finish(request_id="r1", seq=1, response=Response(model="m")))
    assert route.done and "r1" not in table
    taken = route.ready()
    assert [type(ev).__name__ for ev in taken] == ["TextDelta", "Finish"]
    route.deliver(delta(2))  # nothing after the terminal one
    assert route.ready() == []


async def test_next_event_then_ready_hands_on_a_burst_whole():
    route, _, _ = make_route()
    got: list[list[int]] = []

    async def consume() -> None:
        while (first := await route.next_event()) is not None:
            got.append([first.seq, *(ev.seq for ev in route.ready())])

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            for seq in range(4):  # a burst: all four arrive before the consumer runs
                route.deliver(delta(seq))
            await trio.testing.wait_all_tasks_blocked()
            route.fail(ErrorInfo(error_class="other", retryable=False, message="gone"))
    assert got == [[0, 1, 2, 3], [4]]
