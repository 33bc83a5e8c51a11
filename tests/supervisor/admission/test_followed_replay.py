"""What a daemon keeps of the requests it follows for its clients (another daemon ran
them): replayed as the client's own, let go after `keep_s`, and bounded in bytes."""

from __future__ import annotations

from typing import Any

import trio

from trunkline.protocol import codec
from trunkline.protocol.codec import frame_event, split_frame
from trunkline.protocol.messages import Finish, FinishReason, Message, Replay, Response, TextDelta
from trunkline.supervisor.admission import remote
from trunkline.supervisor.admission.remote import Followed, SharedRequests


def payloads(request_id: str, text: str) -> list[bytes]:
    events: list[Any] = [
        TextDelta(request_id=request_id, seq=0, text=text),
        Finish(
            request_id=request_id,
            seq=1,
            response=Response(
                id="r",
                model="m",
                provider="p",
                message=Message.assistant(text),
                finish_reason=FinishReason(reason="stop"),
            ),
        ),
    ]
    return [bytes(split_frame(frame_event("c-owner", event))[1]) for event in events]


def follower(keep_s: float = 60.0) -> SharedRequests:
    return SharedRequests(None, keep_s=keep_s, wait_s=5.0, publish=lambda frame: None)  # type: ignore[arg-type]  # no store needed


async def follow(shared: SharedRequests, request_id: str, client_id: str, result: list[bytes]) -> None:
    async def found(request_id: str, wait_s: float) -> list[bytes]:
        return result

    shared._wait_for_result = found  # type: ignore[method-assign]  # the owner's stored result, at once
    shared.followed[request_id] = Followed(client_id)
    shared.following += 1
    await shared._follow(client_id, request_id, "daemon-a", 5.0)


async def test_a_followed_request_replays_for_its_client_only_from_any_seq():
    shared = follower()
    shared.followed["r1"] = Followed("c1")
    assert shared.replay(Replay(request_id="r1"), lambda c: c == "c1").state == "running"
    await follow(shared, "r1", "c1", payloads("r1", "hello"))
    whole = shared.replay(Replay(request_id="r1"), lambda c: c == "c1")
    tail = shared.replay(Replay(request_id="r1", from_seq=1), lambda c: c == "c1")
    assert whole is not None and whole.state == "ended" and (whole.first_seq, whole.last_seq) == (0, 1)
    assert [type(codec.decode_event(bytes(e))) for e in whole.events] == [TextDelta, Finish]
    assert tail is not None and [type(codec.decode_event(bytes(e))) for e in tail.events] == [Finish]
    assert shared.replay(Replay(request_id="r1"), lambda c: c == "c2") is None


async def test_followed_results_are_let_go_after_keep_s_and_past_the_byte_bound(autojump_clock, monkeypatch):
    shared = follower(keep_s=10.0)
    await follow(shared, "old", "c1", payloads("old", "x"))
    await trio.sleep(11)
    await follow(shared, "new", "c1", payloads("new", "y"))
    assert list(shared.followed) == ["new"]  # the old one ended more than keep_s ago
    size = shared.followed_bytes
    monkeypatch.setattr(remote, "MAX_FOLLOWED_BYTES", size + 10)
    await follow(shared, "newer", "c1", payloads("newer", "z"))
    assert list(shared.followed) == ["newer"] and shared.followed_bytes <= size + 10
