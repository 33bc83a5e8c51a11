"""`python -m bench.admission` measures every line it reports, against a real redis-server
(no number is asserted but the round trips per admit, which the store's design fixes)."""

from __future__ import annotations

import sys

import trio

from helpers import REPO


async def test_the_admission_bench_reports_memory_and_redis_with_one_round_trip_per_admit() -> None:
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", "bench.admission", "--requests", "50"], cwd=REPO, capture_stdout=True
        )
    out = done.stdout.decode()
    for line in ("memory   admit+settle p50", "redis    PING p50", "redis    admit p50", "settle batched by 64"):
        assert line in out, out
    assert "1.00 round trips per request on the submit path" in out, out
