"""Restart intensity as a sliding window over trio's clock, driven by a mock clock."""

from __future__ import annotations

import trio

from trunkline.supervisor.tree import Intensity


async def test_allows_max_restarts_within_the_window(autojump_clock):
    intensity = Intensity(max_restarts=3, window_s=10)
    results = []
    for _ in range(4):
        results.append(intensity.allow(trio.current_time()))
        await trio.sleep(1)
    assert results == [True, True, True, False]


async def test_old_crashes_fall_out_of_the_window(autojump_clock):
    intensity = Intensity(max_restarts=2, window_s=5)
    assert intensity.allow(trio.current_time())
    assert intensity.allow(trio.current_time())
    await trio.sleep(6)
    assert intensity.allow(trio.current_time())  # the first two are older than the window
    assert intensity.allow(trio.current_time())
    assert not intensity.allow(trio.current_time())
    assert trio.current_time() == 6
