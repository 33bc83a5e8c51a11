"""Requests real SDKs and agents sent to OpenAI's Responses API (`../shared/recordings`), replayed
at the front door as they were recorded, with a fake OpenAI upstream answering each with the
answer OpenAI gave it (bytes as recorded, cut at odd offsets). Each is answered in a form the
`openai` SDK's types validate: a response object, an event stream its stream helper accepts, or
an error it raises as its own.

A body that uses what the door does not run (OpenAI's built-in tools, a field it does not take)
is refused with a sentence naming the field and how to carry it to an OpenAI model; sent again
the way the sentence says, it is accepted and the field reaches OpenAI as it was given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import trio
from openai.lib.streaming.responses import AsyncResponseStreamManager
from openai.types.responses import Response, ResponseStreamEvent

from fakes.upstream import Reply
from shared_door import SharedDoor

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO.parent / "shared" / "recordings" / "openai-responses"


def recorded() -> list[Path]:
    cases = []
    for request in sorted(RECORDINGS.glob("*/*/request.json")):
        sent = json.loads(request.read_text())
        if sent.get("method") == "POST" and isinstance(sent.get("body"), dict):
            cases.append(request.parent)
    return cases


CASES = recorded()


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedDoor]:
    if not CASES:
        pytest.skip("../shared/recordings is not present")
    with SharedDoor() as door:
        yield door


def sdk(door: SharedDoor) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=door.base_url, api_key=door.key, max_retries=0, _strict_response_validation=True)


def upstream_reply(case: Path) -> Reply:
    meta = json.loads((case / "meta.json").read_text())
    body = (case / "response.body").read_bytes()
    chunks = [body[i : i + 173] for i in range(0, len(body), 173)]  # inside UTF-8 sequences and JSON
    return Reply(meta.get("status") or 200, {"content-type": meta.get("content_type") or "application/json"}, chunks)


def carried(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the door's refusals say to send it: what only OpenAI runs moved into
    `provider_options.openai` (the tools list as OpenAI takes it, include values, other fields)."""
    known = set(openai.types.responses.response_create_params.ResponseCreateParamsBase.__annotations__)
    out = dict(body)
    openai_options: dict[str, Any] = {}
    if any(t.get("type") != "function" for t in out.get("tools") or []):
        openai_options["tools"] = out.pop("tools")
    extra_include = [i for i in out.get("include") or [] if i != "reasoning.encrypted_content"]
    if extra_include:
        openai_options["include"] = extra_include
        out["include"] = ["reasoning.encrypted_content"]
    for name in ("moderation",):
        if name in out:
            openai_options.setdefault("extra_body", {})[name] = out.pop(name)
    assert set(out) <= known | {"stream"}, set(out) - known
    out["provider_options"] = {"openai": openai_options}
    return out


async def replay(client: openai.AsyncOpenAI, body: dict[str, Any]) -> Response:
    """The body as sent, read by the SDK: a whole response validated, or a stream through
    the SDK's own stream helper (which checks the sequence), ending in its final response."""
    if not body.get("stream"):
        return await client.post("/responses", cast_to=Response, body=body)
    request = client.post(
        "/responses", cast_to=Response, body=body, stream=True, stream_cls=openai.AsyncStream[ResponseStreamEvent]
    )
    manager = AsyncResponseStreamManager(request, text_format=openai.omit, input_tools=openai.omit, starting_after=None)
    async with manager as stream:
        async for _ in stream:
            pass
        return await stream.get_final_response()


@pytest.mark.parametrize("case", CASES, ids=[c.name[-60:] for c in CASES])
async def test_a_recorded_request_is_answered_as_the_sdk_reads_it(shared: SharedDoor, case: Path):
    shared.forget()
    body = json.loads((case / "request.json").read_text())["body"]
    body["model"] = f"openai:{body['model']}"  # behind the door, the fake OpenAI upstream
    answer = json.loads((case / "meta.json").read_text())
    shared.openai.upstream.route("POST", "/v1/responses", upstream_reply(case))
    client = sdk(shared)
    failed: openai.APIStatusError | None = None
    with trio.fail_after(30):
        try:
            response = await replay(client, body)
        except openai.APIStatusError as exc:
            failed = exc
        if isinstance(failed, openai.BadRequestError) and "provider_options.openai" in failed.message:
            assert not shared.openai.sent()
            body = carried(body)
            response = await replay(client, body)
            failed = None
    if failed is not None:
        # OpenAI's own refusal passed on (a model it does not have is a 404, as the issue has it),
        # or a value the daemon refuses before any call.
        assert (answer["status"] or 200) >= 400 or not shared.openai.sent(), failed.message
        assert failed.body["message"] and failed.body["type"] in ("invalid_request_error", "server_error")
        return
    assert answer["status"] in (200, None)
    assert response.status in ("completed", "incomplete")
    assert response.model == body["model"] and response.output
    (sent,) = shared.openai.sent()
    given = body.get("provider_options", {}).get("openai", {})
    for name, value in given.items():  # what was carried reached OpenAI as given
        if name == "extra_body":
            assert all(sent[k] == v for k, v in value.items())
        elif name == "include":
            assert set(value) <= set(sent["include"])
        else:
            assert sent[name] == value
    recorded_input = body["input"] if isinstance(body["input"], list) else []
    for item in recorded_input:
        if item.get("type") == "reasoning" and item.get("encrypted_content"):
            assert item in sent["input"]  # OpenAI's own reasoning items go back as they came
