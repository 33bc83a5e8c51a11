"""Idempotency across daemons: a request id is served once, whichever daemon gets it.

With shared state, a submit's request id is claimed in the shared store before its
job goes to a worker. A daemon whose claim finds the id taken does not call the
provider: it answers `accepted` with `duplicate: true`, then waits (polling with
backoff, bounded by the request timeout) for the owner to store the request's
result, and publishes those events to its own client, re-framed under that client's
topic. The owner stores a request's frames when it ends (`ended`, the relay's end of
a request), at most `MAX_RESULT_BYTES` of them; past that the terminal event alone,
which carries the whole response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
import trio

from ...protocol.codec import SEPARATOR, frame_event, split_frame
from ...protocol.messages import (
    RETRYABLE,
    Accepted,
    ErrorEvent,
    ErrorInfo,
    Rejected,
    Replay,
    ReplayResult,
    SharedStateStatus,
    Submit,
)
from .redis_client import RedisReplyError, RedisUnreachable
from .store import CLAIMED_BY, Admitted, Duplicate, Limits, Refused, Settlement, Ticket

if TYPE_CHECKING:
    from ..requests import RequestState
    from ..router import Router
    from .shared import SharedStore

log = logging.getLogger("trunkline.supervisor")

#: The most of a request's frames kept for the daemons that follow it.
MAX_RESULT_BYTES = 1024 * 1024
#: Requests followed at once at most (each is a task polling Redis).
MAX_FOLLOWED = 10_000
#: The most bytes of followed requests' results kept for `replay` (oldest let go first).
MAX_FOLLOWED_BYTES = 64 * 1024 * 1024
#: Polling for another daemon's result: from the first wait to the last, doubling.
POLL_FIRST_S = 0.02
POLL_MAX_S = 0.5
#: Beyond a request's own timeout, how long it may wait in its owner's queue (at most
#: as long again as its timeout).
QUEUE_MARGIN_S = 30.0

_frames = msgspec.msgpack.Decoder(list[bytes])
_NO_LIMITS = Limits()


class _Seq(msgspec.Struct):
    seq: int = 0


_seq = msgspec.msgpack.Decoder(_Seq)


class Followed(msgspec.Struct):
    """A request this daemon follows for one of its clients: its events once the owner's
    result arrived (None until then), kept for `replay` as long as the daemon keeps its
    own requests' events."""

    client_id: str
    payloads: list[bytes] | None = None
    seqs: list[int] = msgspec.field(default_factory=list)
    ended_at: float | None = None


class SharedRequests:
    """The router's and the relay's way into the shared claims and results.
    `wait_s`: how long a followed request may take when it names no timeout of its own
    (the daemon's `timeouts.request_s` and a margin for its queue)."""

    def __init__(self, store: SharedStore, *, keep_s: float, wait_s: float, publish: Callable[[bytes], None]) -> None:
        self.store = store
        self.keep_s = keep_s
        self.wait_s = wait_s
        self.publish = publish
        self.following = 0
        self.nursery: trio.Nursery | None = None  # the daemon's, given once it runs
        #: The requests followed for this daemon's clients, by id, in the order they came
        #: (oldest first: those past `keep_s` are let go as new ones come).
        self.followed: dict[str, Followed] = {}
        self.followed_bytes = 0
        #: The claim is a ticket of its own (no gate decides the request), settled at its end.
        self.settles_claims = True

    def result_key(self, request_id: str) -> str:
        return self.store.redis.key("result", request_id)

    # -- the router's side ----------------------------------------------------------------

    async def submit(self, router: Router, msg: Submit, pipe_id: int, size: int) -> Accepted | Rejected:
        reply = await self._submit(router, msg, pipe_id, size)
        if isinstance(reply, Rejected) and router.on_refused is not None:
            router.on_refused(reply.error)
        return reply

    async def _submit(self, router: Router, msg: Submit, pipe_id: int, size: int) -> Accepted | Rejected:
        """A submit with the request id claimed first. What this daemon answers alone
        (a request it runs or ran, a client id that is not this connection's, an empty
        id) is answered as without shared state."""
        rid = msg.request_id
        if not rid or router.requests.get(rid) is not None or router.owner.get(msg.client_id) != pipe_id:
            return await _answer(router.submit(msg, pipe_id, size))
        if router.gate is not None and router.gate.claim:
            # The gate's ticket claims the id with the key's and the provider's limits: one
            # round trip for all of it.
            reply = await _answer(router.submit(msg, pipe_id, size))
            if isinstance(reply, Rejected) and (reply.error.provider_code or "").startswith(CLAIMED_BY):
                return self.follow(router, msg, reply.error.provider_code[len(CLAIMED_BY) :])  # type: ignore[index]
            return reply
        decision = await self.store.admit(Ticket(rid, "", _NO_LIMITS, (), 0, time.time(), claim=True))
        if isinstance(decision, Duplicate):
            return self.follow(router, msg, decision.daemon)
        if isinstance(decision, Refused):  # a claim alone has no limits; kept for the merge with keys
            return Rejected(
                request_id=rid,
                error=ErrorInfo(
                    error_class=decision.error_class,
                    message=decision.message,
                    retryable=RETRYABLE[decision.error_class],
                    retry_after_s=decision.retry_after_s,
                ),
            )
        assert isinstance(decision, Admitted)
        reply = await _answer(router.submit(msg, pipe_id, size))
        if isinstance(reply, Rejected):
            # Refused here after all: the id is free again, for the corrected request.
            await self.unclaim(rid)
        return reply

    async def unclaim(self, request_id: str, key: str = "", deployment: str | None = None, tokens: int = 0) -> None:
        """Give back what the request's ticket held and free its id."""
        store = self.store
        await store.release(request_id, key, deployment, tokens)
        if not store.degraded:
            try:
                await store.client.call("DEL", store.redis.key("claim", request_id))
            except (RedisUnreachable, RedisReplyError) as exc:
                log.debug("could not free the claim of %s: %s", request_id, exc)
        elif store.local is not None:
            store.local.claims.pop(request_id, None)

    def follow(self, router: Router, msg: Submit, owner: str) -> Accepted | Rejected:
        """Answer a duplicate of a request another daemon serves: its result, once stored,
        goes to this client."""
        if self.nursery is None or self.following >= MAX_FOLLOWED:
            return Rejected(
                request_id=msg.request_id,
                error=ErrorInfo(
                    error_class="unavailable",
                    message=f"request_id {msg.request_id!r} is being served by daemon {owner}; "
                    "this daemon cannot follow more such requests now: submit it there, or later",
                    retryable=True,
                    retry_after_s=1.0,
                ),
            )
        entry = router.entry(msg.request.model, msg.request.provider)
        provider, model = ("", msg.request.model) if isinstance(entry, ErrorInfo) else (entry.provider, entry.id)
        own = msg.request.timeouts.request_s if msg.request.timeouts is not None else None
        wait_s = self.wait_s if own is None else own + min(QUEUE_MARGIN_S, own)
        self.following += 1
        self._forget_old()
        self.followed[msg.request_id] = Followed(msg.client_id)
        self.nursery.start_soon(self._follow, msg.client_id, msg.request_id, owner, wait_s)
        log.info("request %s is served by daemon %s: this daemon relays its result", msg.request_id, owner)
        return Accepted(request_id=msg.request_id, provider=provider, model=model, duplicate=True)

    async def _follow(self, client_id: str, request_id: str, owner: str, wait_s: float) -> None:
        try:
            frames = await self._wait_for_result(request_id, wait_s)
            topic = client_id.encode() + SEPARATOR
            if frames is None:
                error = ErrorInfo(
                    error_class="timeout",
                    message=f"request {request_id} is served by daemon {owner}, whose result did not "
                    f"arrive within {wait_s:g} s",
                    retryable=True,
                )
                event = frame_event(client_id, ErrorEvent(request_id=request_id, seq=0, error=error))
                frames = [bytes(split_frame(event)[1])]
            followed = self.followed.get(request_id)
            if followed is not None:
                followed.payloads = [bytes(p) for p in frames]
                followed.seqs = [_seq_of(p) for p in followed.payloads]
                followed.ended_at = trio.current_time()
                self.followed_bytes += sum(len(p) for p in followed.payloads)
                self._forget_old()
            for payload in frames:
                self.publish(topic + payload)
        finally:
            self.following -= 1

    def _forget_old(self) -> None:
        """Let go of the followed requests that ended more than `keep_s` ago (and, past
        `MAX_FOLLOWED` kept or `MAX_FOLLOWED_BYTES` held, of the oldest)."""
        horizon = trio.current_time() - self.keep_s
        followed = self.followed
        while followed:
            oldest = next(iter(followed.values()))
            if (
                len(followed) < MAX_FOLLOWED
                and self.followed_bytes <= MAX_FOLLOWED_BYTES
                and (oldest.ended_at is None or oldest.ended_at > horizon)
            ):
                return
            self.followed_bytes -= sum(len(p) for p in oldest.payloads or ())
            del followed[next(iter(followed))]

    def replay(self, msg: Replay, owns: Callable[[str], bool]) -> ReplayResult | None:
        """`replay` of a request this daemon follows for the client asking (None: it
        follows no such request for that client). Its events are those of the owner's
        stored result: seq from 0 (or the terminal event alone, for a long stream)."""
        followed = self.followed.get(msg.request_id)
        if followed is None or not owns(followed.client_id):
            return None
        if followed.payloads is None:
            return ReplayResult(request_id=msg.request_id, state="running", last_seq=-1)
        events = [
            msgspec.Raw(p) for p, seq in zip(followed.payloads, followed.seqs, strict=True) if seq >= msg.from_seq
        ]
        return ReplayResult(
            request_id=msg.request_id,
            events=events,
            first_seq=followed.seqs[0] if followed.seqs else 0,
            last_seq=followed.seqs[-1] if followed.seqs else -1,
            state="ended",
        )

    async def _wait_for_result(self, request_id: str, wait_s: float) -> list[bytes] | None:
        key = self.result_key(request_id)
        wait = POLL_FIRST_S
        with trio.move_on_after(wait_s):
            while True:
                try:
                    blob = await self.store.client.call("GET", key)
                except (RedisUnreachable, RedisReplyError):
                    blob = None  # an outage: look again, within the request's time
                if isinstance(blob, bytes):
                    try:
                        return _frames.decode(blob)
                    except msgspec.DecodeError:
                        log.warning("the stored result of request %s cannot be read", request_id)
                        return None
                await trio.sleep(wait)
                wait = min(wait * 2, POLL_MAX_S)
        return None

    # -- the relay's side -------------------------------------------------------------------

    def ended(self, state: RequestState) -> None:
        """A request this daemon ran has ended: store its frames for the daemons following
        it (with the shared store's next batch of writes: no round trip of its own)."""
        if self.settles_claims:
            self.store.settle_soon(Settlement(state.request_id, "", None, 0, 0, None, time.time()))
        if not state.ring:
            return
        payloads = [bytes(split_frame(frame)[1]) for frame in state.ring]
        if state.first_seq > 0 or sum(len(p) for p in payloads) > MAX_RESULT_BYTES:
            payloads = payloads[-1:]  # the terminal event: the whole response, without the deltas
        self.store.store_soon(
            self.result_key(state.request_id), msgspec.msgpack.encode(payloads), int(self.keep_s * 1000)
        )

    # -- status -----------------------------------------------------------------------------

    def status(self) -> SharedStateStatus:
        health = self.store.health()
        return SharedStateStatus(
            kind=health.kind,
            url=health.extra.get("url", ""),
            degraded=health.degraded,
            since=health.since,
            reason=health.reason,
            daemons=health.daemons,
            local_decisions=int(health.extra.get("local_decisions", "0")),
            pending_settlements=int(health.extra.get("pending_settlements", "0")),
        )


def _seq_of(payload: bytes) -> int:
    try:
        return _seq.decode(payload).seq
    except msgspec.DecodeError:
        return 0


async def _answer(reply: object) -> Accepted | Rejected:
    """The router's answer to a submit, awaited when it is one to come (a gate's store)."""
    coro = getattr(reply, "coro", None)
    if coro is not None:
        reply = await coro
    assert isinstance(reply, (Accepted, Rejected))
    return reply
