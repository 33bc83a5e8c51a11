"""The supervisor's last guard: a bug met while handling one request fails that request
alone, with its terminal event, and the daemon keeps serving every other.

A real `Daemon` (no sockets: its publisher is a list), driven the way its worker links
and housekeeping drive it."""

from __future__ import annotations

import logging
from typing import Any

from fakes.bare_daemon import running
from trunkline.protocol import codec
from trunkline.protocol.codec import decode_event, frame_event, split_frame
from trunkline.protocol.messages import (
    ErrorEvent,
    Finish,
    Relay,
    StreamStart,
    TextDelta,
    TextStart,
)
from trunkline.supervisor import relay as relay_module


def relay_of(request_id: str, *events: Any, terminal: bool = False) -> Relay:
    frames = []
    for seq, ev in enumerate(events):
        ev.request_id, ev.seq = request_id, seq
        frames.append(frame_event("c1", ev))
    return Relay(request_id=request_id, frames=frames, last_seq=len(events) - 1, terminal=terminal)


async def test_a_failing_bill_estimate_still_ends_the_stream_with_its_parts_closed(daemon, monkeypatch, caplog):
    state = running(daemon, "r1")
    daemon.events.relay(
        relay_of(
            "r1", StreamStart(provider="mock", model="echo"), TextStart(index=0), TextDelta(index=0, text="paid for")
        )
    )

    def broken(*args: Any) -> None:
        raise TypeError("Encoding objects of type msgspec.msgpack.Ext is unsupported")

    monkeypatch.setattr(relay_module, "estimate_billing", broken)
    with caplog.at_level(logging.WARNING, logger="trunkline.supervisor"):
        daemon.events.fail_request(state, "unavailable", "the mock worker died mid-request")
    events = daemon.events.pub.events()
    assert [type(e).__name__ for e in events[-2:]] == ["TextEnd", "ErrorEvent"]
    assert events[-1].partial.message.text == "paid for"  # the content is kept, the estimate left out
    assert state.ended and "r1" not in daemon.requests.active and not daemon.requests.of_provider("mock")
    assert "internal error while estimating its bill: TypeError" in caplog.text


async def test_a_relay_that_raises_fails_that_request_only(daemon, monkeypatch):
    slot = daemon.slots["mock"]
    bad, good = running(daemon, "bad"), running(daemon, "good")
    real_relay = daemon.events.relay

    def relay(msg: Relay) -> None:
        if msg.request_id == "bad":
            raise RuntimeError("a bug")
        real_relay(msg)

    monkeypatch.setattr(daemon.events, "relay", relay)
    for rid in ("bad", "good"):
        slot._on_message(codec.encode(relay_of(rid, StreamStart(provider="mock", model="echo"))))
    terminal = [e for e in daemon.events.pub.events() if type(e) in (Finish, ErrorEvent)]
    assert [(e.request_id, e.error.error_class) for e in terminal] == [("bad", "other")]
    assert "other requests are unaffected" in terminal[0].error.message
    assert bad.ended and not good.ended


async def test_a_cancel_its_worker_cannot_take_ends_the_request_here(daemon, monkeypatch):
    state = running(daemon, "r1")

    def full(msg: Any) -> None:
        raise RuntimeError("worker mock: outbound queue full")

    monkeypatch.setattr(daemon.slots["mock"], "send", full)
    daemon.slots["mock"].cancel(state)
    last = daemon.events.pub.events()[-1]
    assert type(last) is Finish and last.response.finish_reason.reason == "cancelled"
    assert state.ended


async def test_the_terminal_event_goes_out_without_its_partial_if_the_partial_cannot_be_encoded(daemon):
    state = running(daemon, "r1", stream=False)
    from trunkline.protocol.messages import Progress, TextPart

    # Something no encoder takes, as a worker bug could leave behind.
    state.progress = Progress(request_id="r1", content=[TextPart(text="x")], model=object())  # type: ignore[arg-type]
    daemon.events.fail_request(state, "unavailable", "worker died")
    last = decode_event(split_frame(daemon.events.pub.frames[-1])[1])
    assert type(last) is ErrorEvent and last.partial is None and state.ended
