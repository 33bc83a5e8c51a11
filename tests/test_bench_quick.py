"""`python -m bench --quick` (what `make bench QUICK=1` runs) goes through every path of
the benchmark and writes its report, offline and without LiteLLM.

Not a timed test: the benchmark's numbers are never asserted, only that each
section was measured and written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from bench.load import Totals, closed_loop
from bench.procs import LineProcess
from bench.skeleton import POINTS, Skeleton

REPO = Path(__file__).resolve().parent.parent

SECTIONS = [
    "## Machine and versions",
    "## Peers",
    "## The fake upstream's own capacity",
    "## 1. One non-streaming request",
    "### Concurrency 256",
    "## 2. Streams of 50 chunks",
    "## The Anthropic path",
    "## 3. Event throughput",
    "## 4. Many subscribers",
    "## 5. Memory",
    "### Soak",
    "## 6. Where the time goes",
    "## 7. The HTTP front door",
    "### A 50-chunk stream at concurrency 1",
    "### Concurrency 64",
    "### The front door against the issue's targets",
    "## 8. The skeleton: trunkline's processes and transports doing nothing",
    "### The hot path against the issue's targets",
    "## 9. Warm workers: the fork server against spawn",
    "## Steering goals beside the measured values",
]

#: The memory table's rows, in the order the stages run: growth must show under the
#: stage that caused it.
MEMORY_ROWS = [
    "| idle, just started |",
    "| after latency, streams, Anthropic and event throughput (",
    "| after subscribers (",
    " streams open (",
    "| idle after all the load above |",
]


@pytest.mark.e2e
def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "latest.md"
    # The peers are switched off so the test never depends on bench/.venv; the report
    # must still say why they are missing.
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-peers", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = out.read_text()
    missing = [s for s in SECTIONS if s not in report]
    assert not missing, missing
    assert "## Failed stages" not in report
    assert "LiteLLM SDK: **skipped**: peers disabled" in report
    assert "LiteLLM proxy: **skipped**: peers disabled" in report
    # Every system that ran has a row with a sample count, and trunkline's did not fail.
    assert "| trunkline | " in report
    memory = report[report.index("## 5. Memory") : report.index("### Soak")]
    where = [memory.find(row) for row in MEMORY_ROWS]
    assert -1 not in where and where == sorted(where), dict(zip(MEMORY_ROWS, where, strict=True))
    assert "| supervisor + workers, PSS |" in memory
    # The HTTP stage: the floor and the front door in each of its three tables, without errors,
    # and the door's CPU split by process; the peers' targets say they were not measured.
    door = report[report.index("## 7. The HTTP front door") : report.index("## 8. The skeleton")]
    assert len(re.findall(r"^\| trunkline front door \| \d+ \| .* \| 0 \|$", door, re.MULTILINE)) == 3, door
    assert len(re.findall(r"^\| floor \(httpx direct\) \| \d+ \| ", door, re.MULTILINE)) == 3, door
    assert re.search(r"^\| 50-chunk stream, per chunk \| [\d.]+ \| [\d.]+ \| ", door, re.MULTILINE), door
    assert "| front door throughput at concurrency 64 | ≥ 1.5× the Portkey gateway's | peer skipped |" in door
    assert re.search(r"\| supervisor \+ 5 idle workers, RSS \| < 150 MB \| [\d.]+ MiB \(PSS [\d.]+ MiB\) \|", report)
    # The skeleton: its own row without errors beside the floor and trunkline, the two targets
    # with a verdict, and its hops measured beside trunkline's in the hop trace.
    skeleton = report[report.index("## 8. The skeleton") : report.index("## 9. Warm workers")]
    assert re.search(r"^\| skeleton \| \d+ \| .* \| 0 \|$", skeleton, re.MULTILINE), skeleton
    assert re.search(r"^\| trunkline \| \d+ \| .* \| 0 \|$", skeleton, re.MULTILINE), skeleton
    assert re.search(r"^\| supervisor \| \d+ .*\| \d+ .*\| [+-]\d+ \|$", skeleton, re.MULTILINE), skeleton
    verdict = r"\| (within goal|\*\*misses goal\*\*) \|$"
    assert re.search(r"^\| trunkline's added p50 at concurrency 1, .*" + verdict, skeleton, re.MULTILINE), skeleton
    assert re.search(r"^\| trunkline's added CPU per request .*" + verdict, skeleton, re.MULTILINE), skeleton
    assert re.search(r"^\| trunkline's own CPU per request .*" + verdict, skeleton, re.MULTILINE), skeleton
    hops = report[report.index("## 6. Where the time goes") : report.index("### Streaming request")]
    assert re.search(r"^\| worker receives the job \| \d+ \(\d+\) \| \d+ \(\d+\) \| measured", hops, re.MULTILINE)
    assert re.search(r"^\| supervisor → worker \(the link\) \| -?\d+ \| -?\d+ \| [+-]\d+ \|", hops, re.MULTILINE)
    assert out.with_suffix(".json").exists()


@pytest.mark.e2e
async def test_the_skeleton_carries_a_request_through_its_processes_and_stamps_every_hop(tmp_path: Path) -> None:
    upstream = LineProcess([sys.executable, "-m", "bench.upstream"], cwd=str(REPO), log=tmp_path / "upstream.log")
    await upstream.start()
    try:
        port = int((await upstream.readline(30)).split()[1])
        async with trio.open_nursery() as nursery:
            skeleton = Skeleton(port, tmp_path / "skeleton.log")
            with trio.fail_after(60):
                await skeleton.start(nursery)
            pids = [skeleton.supervisor_pid, skeleton.worker_pid]
            try:
                with trio.fail_after(30):
                    assert await skeleton.complete("bench-c1") > 0
                    row = await skeleton.traced("bench-c1-t")
            finally:
                await skeleton.stop()
            nursery.cancel_scope.cancel()
    finally:
        await upstream.stop()
    # Every point stamped, in the order the request passed it (one clock for all processes);
    # the upstream's own clocks came back in the content the worker relayed.
    assert set(POINTS) <= set(row), row
    order = ["supervisor_received", "job_sent", "job_received", "attempt_started", "to_upstream", "reply_done"]
    order += ["terminal_emitted", "terminal_received", "total"]
    assert [row[k] for k in order] == sorted(row[k] for k in order), row
    assert 0 < row["accepted"] < row["total"]
    # Its two processes are gone with it: the supervisor on its stdin closing, the worker on its link's.
    for pid in pids:
        with trio.fail_after(10):
            while _alive(pid):
                await trio.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


async def test_the_soak_keeps_counts_and_sums_not_samples() -> None:
    async def op() -> tuple[int, float]:
        return 2, 0.5

    result = await closed_loop(op, 3, count=10, duration_s=60, samples=Totals())
    assert isinstance(result.samples, Totals)
    assert len(result.samples) == 10
    assert result.samples.sums == [20, 5.0]
    assert result.samples.sum(1) == 5.0
    assert Totals().sum(3) == 0  # no operation succeeded: the soak still reports its counts
