"""`python -m bench --quick` (what `make bench QUICK=1` runs) goes through every path of
the benchmark and writes its report, offline and without LiteLLM.

Not a timed test: the benchmark's numbers are never asserted, only that each
section was measured and written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
    "## Steering goals beside the measured values",
]


@pytest.mark.e2e
def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "latest.md"
    # The peers are switched off so the test never depends on bench/.venv; the report
    # must still say why they are missing.
    run = subprocess.run([sys.executable, "-m", "bench", "--quick", "--no-peers", "--out", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    report = out.read_text()
    missing = [s for s in SECTIONS if s not in report]
    assert not missing, missing
    assert "## Failed stages" not in report
    assert "LiteLLM SDK: **skipped**: peers disabled" in report
    assert "LiteLLM proxy: **skipped**: peers disabled" in report
    # Every system that ran has a row with a sample count, and trunkline's did not fail.
    assert "| trunkline | " in report
    assert out.with_suffix(".json").exists()
