"""Anthropic's blocks with no canonical type, both directions: wire JSON -> `ProviderPart` -> wire JSON.

Each kind is golden in both directions (a whole response, a stream, and the
continuation's request body); the recorded continuations (a `pause_turn` turn,
a tool search) are rebuilt from their first response and compared with what
the recording sent back, which Anthropic accepted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import check_invariants
from trunkline.protocol.messages import (
    Message,
    ModelInfo,
    ProviderPart,
    ProviderPartEvent,
    Request,
    TextPart,
    ToolCallPart,
)
from trunkline.workers.anthropic.request import build
from trunkline.workers.anthropic.response import parse
from trunkline.workers.errors import ProviderError

from .test_stream import RECORDINGS, run

SONNET = ModelInfo(
    id="anthropic:claude-sonnet-4-5",
    provider="anthropic",
    wire_name="claude-sonnet-4-5",
    max_output=64000,
    reasoning=True,
)
NO_CACHE = {"anthropic": {"auto_cache": False}}

#: One block of each kind, shaped as Anthropic sends it (and takes it back).
BLOCKS: dict[str, dict] = {
    "server_tool_use": {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": {"query": "trio nurseries"},
    },
    "web_search_tool_result": {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://trio.readthedocs.io/",
                "title": "Trio",
                "encrypted_content": "EqgfCioIARgBIiQ3",
                "page_age": "April 30, 2025",
            }
        ],
    },
    "web_fetch_tool_result": {
        "type": "web_fetch_tool_result",
        "tool_use_id": "srvtoolu_02",
        "content": {
            "type": "web_fetch_result",
            "url": "https://example.com/",
            "retrieved_at": "2025-11-20T10:00:00Z",
            "content": {
                "type": "document",
                "title": "Example",
                "source": {"type": "text", "media_type": "text/plain", "data": "Example Domain"},
            },
        },
    },
    "code_execution_tool_result": {
        "type": "code_execution_tool_result",
        "tool_use_id": "srvtoolu_03",
        "content": {"type": "code_execution_result", "stdout": "4\n", "stderr": "", "return_code": 0, "content": []},
    },
    "bash_code_execution_tool_result": {
        "type": "bash_code_execution_tool_result",
        "tool_use_id": "srvtoolu_04",
        "content": {
            "type": "bash_code_execution_result",
            "stdout": "Sum: 650\n",
            "stderr": "",
            "return_code": 0,
            "content": [],
        },
    },
    "tool_search_tool_result": {
        "type": "tool_search_tool_result",
        "tool_use_id": "srvtoolu_05",
        "content": {
            "type": "tool_search_tool_search_result",
            "tool_references": [{"type": "tool_reference", "tool_name": "get_exchange_rate"}],
        },
    },
    "mcp_tool_use": {
        "type": "mcp_tool_use",
        "id": "mcptoolu_01",
        "name": "ask_question",
        "server_name": "deepwiki",
        "input": {"repoName": "python-trio/trio", "question": "What is a nursery?"},
    },
    "mcp_tool_result": {
        "type": "mcp_tool_result",
        "tool_use_id": "mcptoolu_01",
        "is_error": False,
        "content": [{"type": "text", "text": "A nursery supervises tasks."}],
    },
    "compaction": {"type": "compaction", "content": "The user asked for a greeting; next: say hello."},
}
CONTAINER = {"id": "container_011CdYfpjpVt", "expires_at": "2026-11-23T18:54:08.960841Z"}


def message_with(blocks: list[dict], **extra) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": blocks,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
        **extra,
    }


def sse(events: list[dict]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def streamed(block: dict, index: int = 0) -> list[dict]:
    """How Anthropic streams `block`: a tool's input empty at the start and sent as
    input_json_delta pieces, a compaction's summary as a compaction_delta."""
    start = dict(block)
    deltas: list[dict] = []
    if "input" in block:
        start["input"] = {}
        text = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
            {"type": "input_json_delta", "partial_json": text[i : i + 5]} for i in range(0, len(text), 5)
        ]
    elif block["type"] == "compaction":
        start["content"] = None
        deltas = [{"type": "compaction_delta", "content": block["content"]}]
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def stream_of(blocks: list[dict], container: dict | None = None) -> bytes:
    events: list[dict] = [{"type": "message_start", "message": {**message_with([]), "stop_reason": None}}]
    for i, block in enumerate(blocks):
        events += streamed(block, i)
    delta: dict = {"stop_reason": "end_turn", "stop_sequence": None}
    if container:
        delta["container"] = container
    events += [{"type": "message_delta", "delta": delta, "usage": {"output_tokens": 5}}, {"type": "message_stop"}]
    return sse(events)


def continuation(*parts, model: ModelInfo = SONNET, **fields) -> dict:
    fields.setdefault("provider_options", NO_CACHE)
    request = Request(
        model=model.id,
        messages=[Message.user("go on"), Message(role="assistant", content=list(parts)), Message.user("and?")],
        **fields,
    )
    return build(request, model, provider="anthropic", wire_ids={}, stream=True).body


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_each_kind_from_a_whole_response(kind):
    response = parse(message_with([{"type": "text", "text": "Here:"}, BLOCKS[kind]]))
    assert response.message.content == [
        TextPart(text="Here:"),
        ProviderPart(api="anthropic", kind=kind, data=BLOCKS[kind]),
    ]


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_each_kind_from_a_stream_is_one_event_with_the_whole_block(kind):
    data = stream_of([{"type": "text", "text": "Here:"}, BLOCKS[kind]])
    for chunks in ([data], [data[i : i + 3] for i in range(0, len(data), 3)]):
        events = run(chunks)
        check_invariants(events)
        parts = [e for e in events if type(e) is ProviderPartEvent]
        assert [(e.index, e.api, e.kind, e.data, e.model) for e in parts] == [
            (1, "anthropic", kind, BLOCKS[kind], None)
        ]
        assert events[-1].response.message.content[1] == ProviderPart(
            api="anthropic", kind=kind, data=BLOCKS[kind], provider="anthropic"
        )


@pytest.mark.parametrize("kind", list(BLOCKS))
def test_each_kind_goes_back_verbatim_in_place(kind):
    part = ProviderPart(api="anthropic", kind=kind, data=BLOCKS[kind], provider="anthropic")
    built = build(
        Request(
            model=SONNET.id,
            provider_options=NO_CACHE,
            messages=[
                Message.user("go on"),
                Message(role="assistant", content=[TextPart(text="Before."), part, TextPart(text="After.")]),
                Message.user("and?"),
            ],
        ),
        SONNET,
        provider="anthropic",
        wire_ids={},
        stream=True,
    )
    assert built.body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Before."}, BLOCKS[kind], {"type": "text", "text": "After."}],
    }
    assert built.warnings == [] and "container" not in built.body


def test_the_container_comes_after_the_blocks_and_goes_back_as_container():
    response = parse(message_with([BLOCKS["bash_code_execution_tool_result"]], container=CONTAINER))
    assert response.message.content[-1] == ProviderPart(api="anthropic", kind="container", data=CONTAINER)
    events = run([stream_of([BLOCKS["server_tool_use"]], container=CONTAINER)])
    check_invariants(events)
    assert [(e.index, e.kind, e.data) for e in events if type(e) is ProviderPartEvent] == [
        (0, "server_tool_use", BLOCKS["server_tool_use"]),
        (1, "container", CONTAINER),
    ]
    older = ProviderPart(api="anthropic", kind="container", data={"id": "container_old"})
    newer = ProviderPart(api="anthropic", kind="container", data=CONTAINER)
    body = continuation(older, TextPart(text="ran it"), newer)
    # the last container of the history is the one to reuse; it is not a block
    assert body["container"] == CONTAINER["id"]
    assert body["messages"][1]["content"] == [{"type": "text", "text": "ran it"}]
    # the caller's own choice wins
    assert (
        continuation(
            newer,
            TextPart(text="x"),
            provider_options={"anthropic": {"auto_cache": False, "container": "container_mine"}},
        )["container"]
        == "container_mine"
    )


def test_parts_of_another_api_are_dropped_with_a_warning():
    foreign = ProviderPart(
        api="openai", kind="reasoning", data={"type": "reasoning", "encrypted_content": "x"}, provider="openai"
    )
    request = Request(
        model=SONNET.id,
        provider_options=NO_CACHE,
        messages=[
            Message.user("go on"),
            Message(role="assistant", content=[foreign, TextPart(text="Hi.")]),
            Message.user("and?"),
        ],
    )
    built = build(request, SONNET, provider="anthropic", wire_ids={}, stream=True)
    assert built.body["messages"][1]["content"] == [{"type": "text", "text": "Hi."}]
    assert [w.code for w in built.warnings] == ["provider_part_dropped"]
    assert "openai content (reasoning)" in built.warnings[0].message


def test_a_part_tied_to_another_model_is_dropped_with_a_warning():
    tied = ProviderPart(api="anthropic", kind="compaction", data=BLOCKS["compaction"], model="claude-opus-5-5")
    request = Request(
        model=SONNET.id,
        provider_options=NO_CACHE,
        messages=[
            Message.user("go on"),
            Message(role="assistant", content=[tied, TextPart(text="Hi.")]),
            Message.user("?"),
        ],
    )
    built = build(request, SONNET, provider="anthropic", wire_ids={}, stream=False)
    assert built.body["messages"][1]["content"] == [{"type": "text", "text": "Hi."}]
    assert "claude-opus-5-5" in built.warnings[0].message


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        (ProviderPart(api="anthropic", kind="compaction", data="a summary"), "whose `type` is 'compaction'"),
        (ProviderPart(api="anthropic", kind="compaction", data={"type": "server_tool_use"}), "whose `type`"),
        (ProviderPart(api="anthropic", kind="container", data="container_1"), "container's `id`"),
    ],
)
def test_a_malformed_part_is_refused_clearly(part, problem):
    with pytest.raises(ProviderError) as info:
        continuation(part, TextPart(text="x"))
    assert info.value.error_class == "invalid_request" and problem in info.value.message


# -- the recorded continuations ------------------------------------------------------


def recorded_pair(name: str) -> tuple[bytes, dict]:
    base = RECORDINGS / "pydantic+pydantic-ai" / name
    first, second = Path(f"{base}.0"), Path(f"{base}.1")
    if not first.exists():
        pytest.skip("../shared/recordings/anthropic is not present")
    return (first / "response.body").read_bytes(), json.loads((second / "request.json").read_text())["body"]


def test_the_recorded_pause_turn_goes_back_as_the_recording_sent_it():
    data, sent_back = recorded_pair(
        "tests__models__cassettes__test_anthropic__test_pause_turn_web_search_streaming_vcr"
    )
    events = run([data[i : i + 4096] for i in range(0, len(data), 4096)])
    check_invariants(events)
    response = events[-1].response
    assert response.finish_reason.raw == "pause_turn"
    kinds = [p.kind for p in response.message.content if type(p) is ProviderPart]
    assert kinds.count("server_tool_use") == 11 and kinds.count("web_search_tool_result") == 10
    first_user = sent_back["messages"][0]["content"][0]["text"]
    body = build(
        Request(
            model=SONNET.id,
            provider_options=NO_CACHE,
            reasoning_effort="low",
            messages=[Message.user(first_user), response.message],
        ),
        SONNET,
        provider="anthropic",
        wire_ids={},
        stream=True,
    ).body
    ours, theirs = body["messages"][1]["content"], sent_back["messages"][1]["content"]
    assert body["messages"][0] == sent_back["messages"][0] and len(ours) == len(theirs) == 25
    assert [essentials(b) for b in ours] == [essentials(b) for b in theirs]  # the blocks Anthropic accepted
    # ... and ours are the blocks exactly as Anthropic sent them (the recording's client re-serialized
    # them: it left out `caller` and folded typographic quotes in titles to ASCII)
    blocks = [p.data for p in response.message.content if type(p) is ProviderPart]
    assert [b for b in ours if b["type"] not in ("text", "thinking")] == blocks


def essentials(block: dict) -> tuple:
    """What makes a block the same block, whoever serialized it."""
    content = block.get("content")
    secrets = [r.get("encrypted_content") for r in content] if isinstance(content, list) else content
    return (
        block["type"],
        block.get("id"),
        block.get("tool_use_id"),
        block.get("input"),
        block.get("text"),
        block.get("signature"),
        secrets if block["type"] != "text" else None,
    )


def test_the_recorded_tool_search_continues_as_the_recording_did():
    data, sent_back = recorded_pair("tests__cassettes__test_tool_search__test_anthropic_native_tool_search_streaming")
    events = run([data])
    response = events[-1].response
    call = next(p for p in response.message.content if type(p) is ToolCallPart)
    user = sent_back["messages"][0]["content"][0]["text"]
    result = sent_back["messages"][2]["content"][0]
    body = build(
        Request(
            model=SONNET.id,
            provider_options=NO_CACHE,
            messages=[
                Message.user(user),
                response.message,
                Message.tool_result(call.id, [TextPart(text=result["content"][0]["text"])]),
            ],
        ),
        SONNET,
        provider="anthropic",
        wire_ids={call.id: call.provider_id},
        stream=True,
    ).body
    assert body["messages"][1] == sent_back["messages"][1]


def recorded_messages() -> list[Path]:
    """Every recorded whole (non-streamed) Anthropic message."""
    out = []
    for case in sorted(RECORDINGS.glob("*/*")) if RECORDINGS.exists() else []:
        meta = json.loads((case / "meta.json").read_text())
        if meta.get("stream_kind") is None and (meta.get("status") or 200) == 200:
            out.append(case)
    return out


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings/anthropic is not present")
@pytest.mark.parametrize("case", recorded_messages(), ids=lambda p: p.name[-60:])
def test_recorded_messages_keep_every_block(case: Path):
    body = json.loads((case / "response.body").read_text())
    response = parse(body)
    canonical = {"text", "thinking", "redacted_thinking", "tool_use"}
    expected = [(b["type"], b) for b in body["content"] if b["type"] not in canonical]
    if body.get("container"):
        expected.append(("container", body["container"]))
    assert [(p.kind, p.data) for p in response.message.content if type(p) is ProviderPart] == expected
    assert len(response.message.content) == len(body["content"]) + bool(body.get("container"))
    # and they go back as they came
    if expected:
        sent = build(
            Request(
                model=SONNET.id,
                provider_options=NO_CACHE,
                messages=[Message.user("x"), response.message, Message.user("y")],
            ),
            SONNET,
            provider="anthropic",
            wire_ids={},
            stream=True,
        ).body
        assert [b for b in sent["messages"][1]["content"] if b["type"] not in canonical] == [
            b for kind, b in expected if kind != "container"
        ]


@settings(max_examples=100, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1), max_size=60),
    kinds=st.lists(st.sampled_from(list(BLOCKS)), min_size=1, max_size=6),
)
def test_any_chunking_of_any_blocks_gives_the_same_parts(cuts, kinds):
    data = stream_of([BLOCKS[k] for k in kinds], container=CONTAINER)
    points = sorted({c % len(data) for c in cuts} - {0})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    events = run(chunks)
    check_invariants(events)
    assert [(e.kind, e.data) for e in events if type(e) is ProviderPartEvent] == [
        *((k, BLOCKS[k]) for k in kinds),
        ("container", CONTAINER),
    ]


@settings(max_examples=100, deadline=None)
@given(junk=st.binary(max_size=200))
def test_garbage_in_a_provider_block_never_escapes_as_an_exception(junk):
    head = stream_of([BLOCKS["server_tool_use"]])
    cut = head.index(b"event: content_block_stop")
    events = run([head[:cut], junk, head[cut:]])
    assert type(events[-1]).__name__ in ("Finish", "ErrorEvent")
