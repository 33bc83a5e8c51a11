"""The README's Python programs run as written against a real daemon (the mock), and
print what the README says they print (the `text` block right after a program)."""

from __future__ import annotations

import re
import sys

import pytest
import trio

from helpers import REPO

pytestmark = pytest.mark.e2e

BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def programs() -> list[tuple[str, str | None]]:
    """(program, expected output or None) for each complete Python program in the README."""
    blocks = BLOCK.findall((REPO / "README.md").read_text())
    out = []
    for i, (lang, code) in enumerate(blocks):
        if lang == "python" and ("trio.run(" in code or "asyncio.run(" in code):
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            out.append((code, after[1] if after is not None and after[0] == "text" else None))
    return out


def test_the_readme_has_the_tour_programs():
    codes = [code for code, _ in programs()]
    assert any("trunkline.generate(" in c and "tools=" in c for c in codes)
    assert any("trunkline.generate_object(" in c for c in codes)


@pytest.mark.parametrize(("code", "expected"), programs(), ids=lambda v: (v or "").strip().split("\n")[0][:40])
async def test_a_readme_program_runs_as_written(daemon, code, expected):
    env = {**daemon.env, "TRUNKLINE_RUNTIME_DIR": str(daemon.runtime_dir)}
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", code], capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode() == ""
    if expected is not None:
        assert result.stdout.decode() == expected
