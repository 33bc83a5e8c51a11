"""The official Node SDKs (`openai` and `@anthropic-ai/sdk`, from npm into tests/node by
`make test`) as clients of a real daemon's front door: a node script per exchange
(tests/node/*.mjs) prints what the SDK made of the answers, one JSON line, and the
test checks it. The mock plays the model; its turns are scripted by
`provider_options`, sent as a field the SDKs' types do not know, as an application
would send it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from door import Door

pytestmark = pytest.mark.e2e

NODE_DIR = Path(__file__).resolve().parent.parent / "node"

#: The mock's two turns of a tool-calling exchange: a call, then the answer to its result.
TOOL_TURNS = {
    "mock": {
        "turns": [
            [{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}, {"finish": "tool_calls"}],
            [{"text": "It is 21 °C in Paris."}],
        ]
    }
}


def _node() -> str:
    """Never a skip: without node or the SDKs these tests fail, saying how to get them."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the Node SDK tests need node 20 or later")
    for package in ("openai", "@anthropic-ai/sdk"):
        if not (NODE_DIR / "node_modules" / package / "package.json").exists():
            pytest.fail(
                f"{package} is not in tests/node/node_modules: `make test` installs it (npm ci --prefix tests/node)"
            )
    return node


async def exchange(door: Door, script: str, model: str, prompt: str, extra: dict[str, Any] | None = None) -> Any:
    """Run one node script against the door; what it printed, decoded."""
    node = _node()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "TL_DOOR_URL": door.url,
        "TL_DOOR_KEY": door.key,
        "TL_SCENARIO": json.dumps({"model": model, "prompt": prompt, "extra": extra or {}}),
    }
    with trio.fail_after(60):
        done = await trio.run_process(
            [node, str(NODE_DIR / script)],
            env=env,
            cwd=str(NODE_DIR),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert door.key not in stdout + stderr
    assert done.returncode == 0, f"{script} failed:\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


async def test_the_openai_sdk_streams_a_chat_completion(door: Door):
    out = await exchange(door, "openai_stream.mjs", "mock:echo", "hello from node through the door")
    assert "".join(out["deltas"]) == out["content"] == "hello from node through the door"
    assert len(out["deltas"]) > 1  # the echo comes word by word: a stream, not one chunk
    assert out["finish_reason"] == "stop" and out["model"] == "mock:echo"
    assert out["events"].count("content.done") == 1 and "usage chunk" not in out["events"]


async def test_the_openai_sdk_streams_the_usage_when_asked(door: Door):
    out = await exchange(
        door, "openai_stream.mjs", "mock:echo", "count me", {"stream_options": {"include_usage": True}}
    )
    assert out["content"] == "count me" and out["finish_reason"] == "stop"
    chunks = [e for e in out["events"] if e.endswith("chunk")]
    assert chunks[-1] == "usage chunk" and "usage chunk" not in chunks[:-1]  # one last chunk, without choices
    usage = out["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


async def test_the_openai_sdk_runs_a_tool_through_the_door(door: Door):
    out = await exchange(
        door, "openai_tools.mjs", "mock:echo", "What is the weather in Paris?", {"provider_options": TOOL_TURNS}
    )
    assert out["calls"] == [{"city": "Paris"}]  # the arguments, joined from their fragments by the SDK
    assert out["content"] == "It is 21 °C in Paris."
    assert out["finish_reasons"] == ["tool_calls", "stop"]
    user, assistant, tool, answer = out["messages"]
    assert [user["role"], assistant["role"], tool["role"], answer["role"]] == ["user", "assistant", "tool", "assistant"]
    (call,) = assistant["tool_calls"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert call["id"] and tool["tool_call_id"] == call["id"]


async def test_the_anthropic_sdk_streams_a_message(door: Door):
    out = await exchange(door, "anthropic_stream.mjs", "mock:echo", "hello from node through the door")
    assert "".join(out["texts"]) == "hello from node through the door"
    assert len(out["texts"]) > 1
    (block,) = out["content"]
    assert block["type"] == "text" and block["text"] == "hello from node through the door"
    assert out["stop_reason"] == "end_turn" and out["role"] == "assistant" and out["model"] == "mock:echo"
    events = out["events"]
    assert events[:2] == ["message_start", "content_block_start"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[2:-3]) == {"content_block_delta"}
    assert out["usage"]["output_tokens"] > 0 and out["usage"]["input_tokens"] > 0


async def test_the_anthropic_sdk_runs_a_tool_through_the_door(door: Door):
    out = await exchange(
        door, "anthropic_tools.mjs", "mock:echo", "What is the weather in Paris?", {"provider_options": TOOL_TURNS}
    )
    assert out["calls"] == [{"city": "Paris"}]
    assert out["first"]["stop_reason"] == "tool_use"
    (use,) = out["first"]["tool_uses"]
    assert use["name"] == "get_weather" and use["input"] == {"city": "Paris"} and use["id"]
    assert out["second"]["stop_reason"] == "end_turn"
    assert [(b["type"], b["text"]) for b in out["second"]["content"]] == [("text", "It is 21 °C in Paris.")]
