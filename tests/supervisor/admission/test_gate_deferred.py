"""Admission against a store that must be awaited (as the Redis store is): the submit
is answered later, its request id cannot be used again meanwhile, a refusal sends no
job, and what was admitted is settled in a task when it ends. A real `Daemon` without
sockets; the store is the memory store behind an answer that waits for the test."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trunkline.config.loader import load_config
from trunkline.protocol import codec
from trunkline.protocol.codec import frame_event
from trunkline.protocol.messages import (
    Accepted,
    Finish,
    Hello,
    Job,
    Message,
    Rejected,
    Relay,
    Request,
    Response,
    StatusQuery,
    StatusReport,
    Submit,
    Usage,
    Welcome,
)
from trunkline.supervisor.admission.gate import Gate
from trunkline.supervisor.admission.memory import MemoryStore
from trunkline.supervisor.admission.store import Decision, ScopeUse, Settlement, StoreHealth, Ticket
from trunkline.supervisor.daemon import Daemon

KEY = "tl-alice-key-0123456789abcdef"


class AwaitedStore:
    """The memory store's answers, each given only once `answer` is set."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.answer = trio.Event()
        self.settled: list[Settlement] = []

    async def admit(self, ticket: Ticket) -> Decision:
        await self.answer.wait()
        return self.inner.admit_now(ticket)

    async def settle(self, settlement: Settlement) -> None:
        self.settled.append(settlement)
        self.inner.settle_now(settlement)

    async def release(self, request_id: str, key: str, deployment: str | None, estimated_tokens: int) -> None:
        self.inner.release_now(request_id)

    async def failure(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        return False

    async def cooldown(self, deployment: str, until: float) -> None:
        pass

    async def use(self, scopes: list[str], now: float) -> list[ScopeUse]:
        await self.answer.wait()
        return self.inner.use_now(scopes, now)

    def health(self) -> StoreHealth:
        return StoreHealth(kind="redis")


class Replies:
    """The control socket's replies, as the router hands them over."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def reply(self, header: bytes, data: bytes, nursery: trio.Nursery) -> None:
        self.sent.append(codec.decode_control_reply(data))


class Published:
    def publish(self, frame: bytes) -> None:
        pass

    def publish_many(self, frames: list[bytes]) -> None:
        pass


class Link:
    """A worker's link that keeps the jobs sent on it (and drops the other messages)."""

    def __init__(self) -> None:
        self.jobs: list[bytes] = []

    closed = False
    pending = 0

    def send(self, payload: bytes) -> bool:
        if isinstance(codec.decode_to_worker(payload), Job):
            self.jobs.append(payload)
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def daemon(tmp_path, monkeypatch) -> Daemon:
    monkeypatch.setenv("TL_T_ALICE", KEY)
    config = load_config(
        None,
        use_user_default=False,
        overrides={"clients": {"alice": {"key_env": "TL_T_ALICE", "limits": {"rpm": 1}}}},
    )
    d = Daemon(config, runtime_dir=tmp_path)
    d.events.pub = Published()
    return d


async def test_a_submit_waits_for_the_store_and_its_id_is_held_meanwhile(daemon, nursery):
    store = AwaitedStore()
    assert daemon.gate is not None
    gate = Gate(store, daemon.gate.keys, daemon.gate.deployments, claim=True)
    gate.nursery = nursery
    router = daemon.router
    router.gate = daemon.events.gate = gate
    replies = Replies()
    router._rep, router._nursery = replies, nursery  # type: ignore[assignment]  # what `serve` sets
    slot = daemon.slots["mock"]
    slot.state, slot.generation, slot.link = "running", 1, Link()  # type: ignore[assignment]  # a stand-in link

    welcome = codec.decode_control_reply(router.on_request(codec.encode(Hello(token=KEY)), b"h", 1) or b"")
    assert isinstance(welcome, Welcome)
    request = Request(model="mock:echo", messages=[Message.user("hi")])

    def submit(rid: str) -> bytes | None:
        return router.on_request(
            codec.encode(Submit(request_id=rid, client_id=welcome.client_id, request=request)), b"s", 1
        )

    assert submit("r1") is None  # answered once the store has
    again = codec.decode_control_reply(submit("r1") or b"")
    assert isinstance(again, Rejected) and "being admitted" in again.error.message
    assert router.on_request(codec.encode(StatusQuery()), b"q", 1) is None
    assert submit("r2") is None
    await trio.testing.wait_all_tasks_blocked()
    assert replies.sent == [] and slot.link.jobs == []  # type: ignore[union-attr]

    store.answer.set()
    await trio.testing.wait_all_tasks_blocked()
    by_type = {type(reply).__name__: reply for reply in replies.sent}
    # The store answered both at once, in an order of its own: one fits the rpm of 1.
    accepted, refused = by_type["Accepted"], by_type["Rejected"]
    assert isinstance(accepted, Accepted) and isinstance(refused, Rejected)
    assert {accepted.request_id, refused.request_id} == {"r1", "r2"}
    assert refused.error.error_class == "rate_limit" and "rpm = 1" in refused.error.message
    assert len(slot.link.jobs) == 1  # type: ignore[union-attr]  # the refused one sent nothing
    assert refused.request_id not in daemon.requests.active and not gate.pending
    assert isinstance(by_type["StatusReport"], StatusReport)
    rid = accepted.request_id

    # Its end settles it, in a task (one more round trip, after the terminal event went out).
    finish = Finish(
        request_id=rid, seq=0, response=Response(usage=Usage(input_tokens=5, output_tokens=7, total_tokens=12))
    )
    slot._on_message(
        codec.encode(Relay(request_id=rid, frames=[frame_event(welcome.client_id, finish)], last_seq=0, terminal=True))
    )
    await trio.testing.wait_all_tasks_blocked()
    assert [(s.request_id, s.key, s.tokens) for s in store.settled] == [(rid, "alice", 12)]
    (alice,) = await gate.use()
    assert (alice.name, alice.requests_last_minute, alice.tokens_last_minute, alice.in_flight) == ("alice", 1, 12, 0)
