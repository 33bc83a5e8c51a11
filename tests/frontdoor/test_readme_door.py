"""The README's front-door section runs as written: its config serves the door, and its
programs, given the environment its `export` lines set, print what it says they print."""

from __future__ import annotations

import re
import sys

import pytest
import trio
import yaml

from door import KEY, start_door
from helpers import REPO

pytestmark = pytest.mark.e2e

SECTION = "## Use trunkline from any OpenAI or Anthropic client"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    return BLOCK.findall(text[start : text.index("\n## ", start + 1)])


def programs() -> list[tuple[str, str]]:
    found = blocks()
    return [
        (code, found[i + 1][1])
        for i, (lang, code) in enumerate(found)
        if lang == "python" and i + 1 < len(found) and found[i + 1][0] == "text"
    ]


def test_the_section_has_a_program_for_each_sdk():
    codes = [code for code, _ in programs()]
    assert any("from openai import OpenAI" in c for c in codes) and any("import anthropic" in c for c in codes)


@pytest.mark.parametrize(("code", "expected"), programs(), ids=lambda v: v.strip().split("\n")[0][:40])
async def test_a_front_door_program_runs_as_written(start_daemon, code, expected):
    (config,) = [yaml.safe_load(body) for lang, body in blocks() if lang == "yaml"]
    (exports,) = [body for lang, body in blocks() if lang == "sh"]
    config["http"]["listen"] = "127.0.0.1:0"  # the README's port may be taken here
    door = await start_door(start_daemon, config, env={"TRUNKLINE_HTTP_KEY": KEY}, keys=False)
    env = {**door.daemon.env, "TRUNKLINE_HTTP_KEY": KEY}
    for name, value in re.findall(r"(\w+)=(\S+)", exports):
        env[name] = value.replace('"$TRUNKLINE_HTTP_KEY"', KEY).replace("http://127.0.0.1:8300", door.url)
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", code], capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == expected
