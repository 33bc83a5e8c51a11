"""`python -m bench --quick` (what `make bench QUICK=1` runs) goes through every path of
the benchmark and writes its report, offline and without LiteLLM.

Not a timed test: the benchmark's numbers are never asserted, only that each
section was measured and written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.load import Totals, closed_loop

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
    "## 8. Warm workers: the fork server against spawn",
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
    door = report[report.index("## 7. The HTTP front door") : report.index("## Steering goals")]
    assert len(re.findall(r"^\| trunkline front door \| \d+ \| .* \| 0 \|$", door, re.MULTILINE)) == 3, door
    assert len(re.findall(r"^\| floor \(httpx direct\) \| \d+ \| ", door, re.MULTILINE)) == 3, door
    assert re.search(r"^\| 50-chunk stream, per chunk \| [\d.]+ \| [\d.]+ \| ", door, re.MULTILINE), door
    assert "| front door throughput at concurrency 64 | ≥ 1.5× the Portkey gateway's | peer skipped |" in door
    assert re.search(r"\| supervisor \+ 5 idle workers, RSS \| < 150 MB \| [\d.]+ MiB \(PSS [\d.]+ MiB\) \|", report)
    assert out.with_suffix(".json").exists()


async def test_the_soak_keeps_counts_and_sums_not_samples() -> None:
    async def op() -> tuple[int, float]:
        return 2, 0.5

    result = await closed_loop(op, 3, count=10, duration_s=60, samples=Totals())
    assert isinstance(result.samples, Totals)
    assert len(result.samples) == 10
    assert result.samples.sums == [20, 5.0]
    assert result.samples.sum(1) == 5.0
    assert Totals().sum(3) == 0  # no operation succeeded: the soak still reports its counts
