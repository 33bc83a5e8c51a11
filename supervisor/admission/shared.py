"""The store a daemon uses when `shared_state.redis` is set: Redis while it answers,
the daemon's memory while it does not, and a catch-up between the two.

A call that fails or times out (`shared_state.timeout_s`) puts the store in degraded
mode at once: that admit, and every one after it, is decided on a local
`MemoryStore`, never refused for the outage. Locally each rate limit is divided by
the number of daemons last seen sharing the store (each refreshes its presence, with
a short expiry, in one sorted set), and each budget's remainder (the budget less the
last spend read from Redis) is divided the same way. Settlements made meanwhile are
kept; when the connection is back they are replayed (the settle script is idempotent
per request id, so a replay interrupted and sent again counts once), and only then
does the store decide on Redis again. A WARN line marks each change; `health()` and
the metrics say so.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ...protocol.ratelog import RateLimitedLog
from .memory import MemoryStore
from .redis_client import RedisClient, RedisReplyError, RedisUnreachable
from .redis_store import RedisStore, StoreError
from .resp import Arg, ErrorReply
from .store import Candidate, Decision, Limits, ScopeUse, Settlement, StoreHealth, Ticket

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("trunkline.supervisor")

#: How long a daemon's presence lasts without a refresh, and how often it refreshes.
PRESENCE_TTL_S = 15.0
PRESENCE_EVERY_S = 5.0
#: Settlements (and stored results) sent in one pipeline at most, and their bytes.
SETTLE_BATCH = 256
BATCH_BYTES = 4 * 1024 * 1024
#: Settlements kept for the catch-up at most (a longer outage drops the oldest, with a log line).
MAX_PENDING = 200_000
#: Scopes whose last spend is kept for a degraded budget (the most recently seen).
MAX_TRACKED_SCOPES = 4096


@dataclass(frozen=True, slots=True)
class _Settle:
    settlement: Settlement
    admitted_locally: bool


@dataclass(frozen=True, slots=True)
class _Release:
    request_id: str
    key: str
    deployment: str | None
    estimated_tokens: int


@dataclass(frozen=True, slots=True)
class _Put:
    """A value to store (a request's result for the daemons following it), sent with the
    next batch of settlements rather than in a round trip of its own."""

    key: str
    value: bytes
    px: int


_Pending = _Settle | _Release | _Put


class SharedStore:
    """`AdmissionStore` over a Redis shared by several daemons, degrading to memory."""

    kind = "redis"

    def __init__(
        self,
        client: RedisClient,
        *,
        daemon: str,
        prefix: str = "trunkline",
        claim_s: float = 300.0,
        presence_ttl_s: float = PRESENCE_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.redis = RedisStore(client, daemon=daemon, prefix=prefix, claim_s=claim_s)
        self.daemon = daemon
        self.claim_s = claim_s
        self.presence_ttl_s = presence_ttl_s
        self.clock = clock
        self.degraded = False
        self.reason: str | None = None
        self.since: float | None = None
        #: Daemons seen sharing the store at the last presence refresh (this one included).
        self.daemons = 1
        self.local_decisions = 0
        #: Settlements the catch-ups after outages counted in Redis.
        self.replayed = 0
        self.local: MemoryStore | None = None
        #: Settlements (with "admitted locally") and releases waiting to reach Redis.
        self.pending: deque[_Pending] = deque()
        #: Requests admitted locally and not yet settled: their settlement counts them.
        self.local_admits: dict[str, None] = {}
        #: By scope ("key:<name>", "deployment:<name>"), its budgets and last known spend.
        self.budgets: dict[str, Limits] = {}
        self.spent: dict[str, tuple[float, float]] = {}
        self._wake_flusher = trio.Event()
        self._went_degraded = trio.Event()
        #: Error replies from Redis (not an outage: the call was answered), a few lines a second.
        self.error_log = RateLimitedLog(log)
        #: Set (and replaced) at each change between degraded and not: tests and status wait on it.
        self.changed = trio.Event()

    # -- running --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The connection, the presence refresh, the settlement flusher and the catch-up,
        until cancelled. Started once the first connection attempt is done."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            if not self.client.is_connected:
                self._degrade(self.client.last_error)
            else:
                with contextlib.suppress(RedisUnreachable, RedisReplyError, StoreError):  # the loop says why
                    await self.refresh()  # present before the first request, not a few seconds on
            nursery.start_soon(self._presence)
            nursery.start_soon(self._flusher)
            nursery.start_soon(self._recover)
            task_status.started()

    async def _presence(self) -> None:
        while True:
            try:
                await self.refresh()
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except (RedisReplyError, StoreError) as exc:
                log.warning("shared state: refreshing this daemon's presence failed: %s", str(exc)[:200])
            await trio.sleep(PRESENCE_EVERY_S)

    async def refresh(self) -> None:
        """Say this daemon is here, count the daemons that are, and read the spend of
        the scopes with budgets (what a degraded daemon divides)."""
        key = self.redis.key("daemons")
        now = self.clock()
        replies = await self.client.pipeline(
            [
                ("ZADD", key, repr(now + self.presence_ttl_s), self.daemon),
                ("ZREMRANGEBYSCORE", key, "-inf", repr(now)),
                ("ZCARD", key),
                ("EXPIRE", key, math.ceil(self.presence_ttl_s * 4)),
            ]
        )
        count = replies[2]
        if isinstance(count, int) and count > 0:
            self.daemons = count
        await self._read_spend(now)

    async def _read_spend(self, now: float) -> None:
        """The spend of every scope with a budget, for dividing its remainder when degraded."""
        scopes = list(self.budgets)
        if not scopes or self.degraded:
            return
        for use in await self.redis.use(scopes, now):
            self.spent[use.scope] = (use.usd_today, use.usd_this_month)

    async def _flusher(self) -> None:
        """Settlements handed over with `settle_soon` (after the request's reply), in batches."""
        while True:
            await self._wake_flusher.wait()
            self._wake_flusher = trio.Event()
            if not self.degraded:
                try:
                    await self._send_pending()
                except RedisUnreachable as exc:
                    self._degrade(str(exc))

    async def _send_pending(self, *, catching_up: bool = False, at_most: int | None = None) -> None:
        """Send what waits (or its first `at_most`), oldest first; each batch leaves the
        queue once Redis answered it (an answer lost on the way means the batch goes
        again: the scripts count it once)."""
        left = len(self.pending) if at_most is None else at_most
        while self.pending and left > 0:
            batch: list[_Pending] = []
            size = 0
            for item in self.pending:
                if len(batch) >= min(SETTLE_BATCH, left) or (batch and size > BATCH_BYTES):
                    break
                batch.append(item)
                size += len(item.value) if isinstance(item, _Put) else 200
            commands: list[tuple[Arg, ...]] = []
            for item in batch:
                if isinstance(item, _Settle):
                    commands.append(self.redis.settle_evalsha(item.settlement, admitted_locally=item.admitted_locally))
                elif isinstance(item, _Put):
                    commands.append(("SET", item.key, item.value, "PX", item.px))
            if commands:
                # What Redis refuses (out of memory, a read-only replica) is dropped, with a
                # log line: no retry would do better, and a queue that never empties would
                # hold up every later settlement.
                try:
                    replies = await self.redis.send(commands)
                except RedisReplyError as exc:
                    self._refused(exc, "a batch of settlements")
                    replies = []
                if catching_up:
                    self.replayed += sum(
                        1 for c, r in zip(commands, replies, strict=False) if c[0] == "EVALSHA" and r == 1
                    )
                failed = [r for r in replies if isinstance(r, ErrorReply)]
                if failed:
                    self._refused(failed[0].message, f"{len(failed)} of a batch's writes")
            for item in batch:
                if isinstance(item, _Release):
                    try:
                        await self.redis.release(item.request_id, item.key, item.deployment, item.estimated_tokens)
                    except RedisReplyError as exc:
                        self._refused(exc, "a release")
            for _ in batch:
                self.pending.popleft()
            left -= len(batch)

    async def _recover(self) -> None:
        while True:
            await self._went_degraded.wait()
            while self.degraded:
                await self.client.connected.wait()
                try:
                    # What the outage left, not what arrives meanwhile: under load, local
                    # decisions queue settlements faster than batches drain, and a catch-up
                    # that waited for an empty queue might never end. The rest goes with the
                    # flusher (each keeps whether it was admitted locally).
                    await self._send_pending(catching_up=True, at_most=len(self.pending))
                except RedisUnreachable as exc:
                    self.reason = str(exc)
                    await trio.sleep(0.05)  # the client reconnects with its own backoff
                    continue
                except (RedisReplyError, StoreError) as exc:
                    log.warning("shared state: replaying settlements failed: %s", str(exc)[:200])
                    await trio.sleep(1.0)
                    continue
                self._recover_now()
                self._wake_flusher.set()
            self._went_degraded = trio.Event()

    def _degrade(self, reason: str) -> None:
        if self.degraded:
            return
        self.degraded = True
        self.reason = reason
        self.since = self.clock()
        self.local = MemoryStore(daemon=self.daemon, claim_s=self.claim_s)
        self._went_degraded.set()
        self._changed()
        log.warning(
            "shared state degraded: %s; deciding locally, each limit divided by %d daemon(s), until Redis answers",
            reason,
            self.daemons,
        )

    def _recover_now(self) -> None:
        outage = self.clock() - (self.since or self.clock())
        self.degraded = False
        self.reason = None
        self.since = None
        self.local = None
        self._changed()
        log.warning(
            "shared state recovered: Redis answers again after %.1f s; settlements replayed, deciding on Redis",
            outage,
        )

    # -- the contract ---------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> Decision:
        self._track(ticket)
        if not self.degraded:
            try:
                return await self.redis.admit(ticket)
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except (RedisReplyError, StoreError) as exc:
                # Answered, but not with a decision (a read-only replica after a failover,
                # out of memory): this request is decided locally; the next asks Redis again.
                self._refused(exc, "an admission")
        return self.admit_locally(ticket)

    def admit_locally(self, ticket: Ticket) -> Decision:
        local = self._local()
        self.local_decisions += 1
        decision = local.admit_now(self._share(ticket))
        if ticket.request_id in local.held:
            self.local_admits[ticket.request_id] = None
            if len(self.local_admits) > MAX_PENDING:
                del self.local_admits[next(iter(self.local_admits))]
        return decision

    def settle_soon(self, settlement: Settlement) -> None:
        """Hand a settlement over without waiting (the relay's end of a request): sent
        in the next batch, or kept for the catch-up."""
        admitted_locally = self._was_local(settlement.request_id)
        if self.local is not None:
            self._settle_in_memory(self.local, settlement)
        self._queue(_Settle(settlement, admitted_locally))
        self._wake_flusher.set()

    def store_soon(self, key: str, value: bytes, px: int) -> None:
        """SET `key` (expiring in `px` ms) with the next batch; dropped while degraded (a
        request's result for other daemons is worth little once they have given up)."""
        if not self.degraded:
            self._queue(_Put(key, value, px))
            self._wake_flusher.set()

    async def settle(self, settlement: Settlement) -> None:
        if self.degraded:
            self.settle_soon(settlement)
            return
        admitted_locally = self._was_local(settlement.request_id)
        try:
            await self.redis.settle(settlement, admitted_locally=admitted_locally)
        except RedisUnreachable as exc:
            self._degrade(str(exc))
            self._queue(_Settle(settlement, admitted_locally))
        except RedisReplyError as exc:
            self._refused(exc, "a settlement")

    async def release(self, request_id: str, key: str, deployment: str | None, estimated_tokens: int) -> None:
        if self._was_local(request_id):
            if self.local is not None:
                self.local.release_now(request_id)
            return
        if not self.degraded:
            try:
                await self.redis.release(request_id, key, deployment, estimated_tokens)
                return
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except RedisReplyError as exc:
                self._refused(exc, "a release")
                return
        self._queue(_Release(request_id, key, deployment, estimated_tokens))

    async def failure(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        if not self.degraded:
            try:
                return await self.redis.failure(
                    deployment, now, threshold=threshold, window_s=window_s, cooldown_s=cooldown_s
                )
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except RedisReplyError as exc:
                self._refused(exc, "a failure count")
        return self._local().failure_now(deployment, now, threshold=threshold, window_s=window_s, cooldown_s=cooldown_s)

    async def cooldown(self, deployment: str, until: float) -> None:
        if not self.degraded:
            try:
                await self.redis.cooldown(deployment, until, now=self.clock())
                return
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except RedisReplyError as exc:
                self._refused(exc, "a cooldown")
        self._local().cooldown_now(deployment, until)

    async def use(self, scopes: list[str], now: float) -> list[ScopeUse]:
        if not self.degraded:
            try:
                return await self.redis.use(scopes, now)
            except RedisUnreachable as exc:
                self._degrade(str(exc))
            except (RedisReplyError, StoreError) as exc:
                self._refused(exc, "a status read")
        return self._local().use_now(scopes, now)

    def health(self) -> StoreHealth:
        return StoreHealth(
            kind="redis",
            degraded=self.degraded,
            reason=self.reason,
            since=self.since,
            daemons=self.daemons,
            extra={
                "url": self.client.target.redacted(),
                "local_decisions": str(self.local_decisions),
                "pending_settlements": str(len(self.pending)),
            },
        )

    # -- inside -----------------------------------------------------------------------------

    def _refused(self, error: object, what: str) -> None:
        self.error_log.note(f"shared state: Redis refused {what}: {str(error)[:200]}")

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _local(self) -> MemoryStore:
        if self.local is None:  # recovered between a failed call and its local decision
            self.local = MemoryStore(daemon=self.daemon, claim_s=self.claim_s)
        return self.local

    def _was_local(self, request_id: str) -> bool:
        """Whether the request was admitted locally (forgotten once asked: it ends once)."""
        if request_id in self.local_admits:
            del self.local_admits[request_id]
            return True
        return False

    def _queue(self, item: _Pending) -> None:
        if len(self.pending) >= MAX_PENDING:
            self.pending.popleft()
            log.warning("shared state: more than %d settlements wait for Redis; the oldest is dropped", MAX_PENDING)
        self.pending.append(item)

    def _track(self, ticket: Ticket) -> None:
        """Remember the budgets the tickets carry, so their spend is read while Redis answers."""
        budgets = self.budgets
        if ticket.key and _has_budget(ticket.key_limits):
            scope = "key:" + ticket.key
            if scope not in budgets:
                self._remember(scope, ticket.key_limits)
        for candidate in ticket.candidates:
            if _has_budget(candidate.limits):
                scope = "deployment:" + candidate.name
                if scope not in budgets:
                    self._remember(scope, candidate.limits)

    def _remember(self, scope: str, limits: Limits) -> None:
        if len(self.budgets) >= MAX_TRACKED_SCOPES:
            del self.budgets[next(iter(self.budgets))]
        self.budgets[scope] = limits

    def _share(self, ticket: Ticket) -> Ticket:
        """The ticket with this daemon's share of each limit."""
        n = max(self.daemons, 1)
        key_limits = _divided(ticket.key_limits, n, self.spent.get("key:" + ticket.key))
        candidates = tuple(
            Candidate(c.name, _divided(c.limits, n, self.spent.get("deployment:" + c.name))) for c in ticket.candidates
        )
        return replace(ticket, key_limits=key_limits, candidates=candidates)

    @staticmethod
    def _settle_in_memory(local: MemoryStore, settlement: Settlement) -> None:
        """Count a settlement in the local view: a request it admitted is settled there;
        one Redis admitted before the outage still adds its cost to the local budgets."""
        if settlement.request_id in local.held:
            local.settle_now(settlement)
            return
        if not settlement.cost_usd:
            return
        if settlement.key and settlement.key in local.keys:
            local.keys[settlement.key].spend(settlement.now, settlement.cost_usd)
        if settlement.deployment and settlement.deployment in local.deployments:
            local.deployments[settlement.deployment].spend(settlement.now, settlement.cost_usd)


def _has_budget(limits: Limits) -> bool:
    return limits.usd_per_day is not None or limits.usd_per_month is not None


def _divided(limits: Limits, n: int, spent: tuple[float, float] | None) -> Limits:
    if limits.empty or (n == 1 and spent is None):
        return limits
    day, month = spent or (0.0, 0.0)
    return Limits(
        rpm=_share(limits.rpm, n),
        tpm=_share(limits.tpm, n),
        parallel=_share(limits.parallel, n),
        usd_per_day=None if limits.usd_per_day is None else max(limits.usd_per_day - day, 0.0) / n,
        usd_per_month=None if limits.usd_per_month is None else max(limits.usd_per_month - month, 0.0) / n,
    )


def _share(limit: int | None, n: int) -> int | None:
    # At least one: a key with a limit smaller than the number of daemons still works
    # during an outage (each daemon may then admit one: an overshoot of up to n - limit).
    return None if limit is None else max(limit // n, 1)


class SharedStateCollector(Collector):
    """`trunkline_shared_state_degraded` (0/1) and the decisions made locally, read at scrape time."""

    def __init__(self, store: SharedStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        store = self.store
        yield GaugeMetricFamily(
            "trunkline_shared_state_degraded",
            "1 while the shared store (Redis) is unreachable and admission is decided locally",
            value=1 if store.degraded else 0,
        )
        yield CounterMetricFamily(
            "trunkline_shared_state_local_decisions",
            "Admission decisions made in this daemon's memory because Redis was unreachable",
            value=store.local_decisions,
        )
        yield GaugeMetricFamily(
            "trunkline_shared_state_daemons",
            "Daemons seen sharing the store at the last presence refresh",
            value=store.daemons,
        )
        yield GaugeMetricFamily(
            "trunkline_shared_state_pending_settlements",
            "Settlements waiting for Redis to answer again",
            value=len(store.pending),
        )
