"""The bad-input log: a few lines a second, then a count of what was held back."""

from __future__ import annotations

import logging

from trunkline.protocol.ratelog import RateLimitedLog


def test_at_most_n_lines_a_second_then_one_summary(caplog):
    now = [100.0]
    log = RateLimitedLog(logging.getLogger("test.ratelog"), per_second=3, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.ratelog"):
        logged = [log.note(f"bad {i}") for i in range(50)]
        now[0] += 0.5
        logged.append(log.note("still the same second"))
        now[0] += 0.6
        logged.append(log.note("a new second"))
    assert logged == [True] * 3 + [False] * 48 + [True]
    assert [r.getMessage() for r in caplog.records] == [
        "bad 0",
        "bad 1",
        "bad 2",
        "... and 48 more like it in the last second, not logged",
        "a new second",
    ]
