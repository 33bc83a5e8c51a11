"""The admission store in Redis, shared by every daemon that names the same Redis.

Each operation is one Lua script (`redis_scripts.py`) run with EVALSHA (loaded with
EVAL the first time a server says NOSCRIPT), so `admit` decides the client key's
limits and budgets, the candidates' cooldowns and limits and the claim of the request
id in one atomic step and one round trip, whatever the number of daemons.

Every key starts with one hash tag, `{<key_prefix>}:`, so all of trunkline's keys fall
in one Redis Cluster slot: a script may only touch keys of one slot, and an admit
touches the key's and several deployments' counters at once. That puts all of
trunkline's state on one shard, which is fine: it is a few small counters per key and
deployment, a claim per recent request, and a few operations per request, far below
what one Redis node serves; the shard's replicas still give failover.

Every key expires: the windows 120 s after their last write (a window is 60 s), the
requests in flight `hold_s` after the last admit, the day's and month's spend an hour
after the day or month ends, the claims after `claim_s` (`replay.keep_s`), the record
of what an admitted request holds and the mark that it was settled after `hold_s`.

`settle` is idempotent per request id (the first settlement sets the mark, a replay
after a reconnect finds it and changes nothing). A request's hold on a `parallel`
slot lapses after `hold_s` even if no settlement ever comes (a daemon that died with
requests running), so a lost daemon cannot hold a key's slots forever.
"""

from __future__ import annotations

import itertools
import os
import time

from .memory import day_end, day_of, month_end, month_of
from .redis_client import RedisClient, RedisReplyError
from .redis_scripts import SCRIPTS, Script
from .resp import Arg, ErrorReply, Reply
from .store import (
    Admitted,
    Decision,
    Duplicate,
    Limits,
    Refused,
    ScopeUse,
    Settlement,
    StoreHealth,
    Ticket,
)

#: How long an admitted request holds its parallel slot without being settled.
HOLD_S = 900.0
#: How long a parallel slot is assumed to take to free (unknown: the memory store's guess).
PARALLEL_RETRY_S = 1.0


class StoreError(Exception):
    """Redis answered something the scripts never return (another program's keys in
    our prefix, or a version skew): a bug to report, never a decision."""


def _limit(value: float | None) -> Arg:
    return "" if value is None else value


def _limits_args(limits: Limits) -> list[Arg]:
    return [
        _limit(limits.rpm),
        _limit(limits.tpm),
        _limit(limits.parallel),
        _limit(limits.usd_per_day),
        _limit(limits.usd_per_month),
    ]


_NO_LIMITS_ARGS: list[Arg] = ["", "", "", "", ""]


def _text(value: Reply) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise StoreError(f"expected a string from Redis, got {type(value).__name__}")


def _list(value: Reply) -> list[Reply]:
    if not isinstance(value, list):
        raise StoreError(f"expected an array from Redis, got {type(value).__name__}")
    return value


class RedisStore:
    """`AdmissionStore` over Redis. `daemon`: this daemon's id (claims name it)."""

    kind = "redis"

    def __init__(
        self,
        client: RedisClient,
        *,
        daemon: str,
        prefix: str = "trunkline",
        claim_s: float = 300.0,
        hold_s: float = HOLD_S,
    ) -> None:
        self.client = client
        self.daemon = daemon
        self.tag = "{" + prefix + "}:"
        self.claim_s = claim_s
        self.hold_s = hold_s
        self._failures = itertools.count()
        self._nonce = os.urandom(4).hex()

    # -- keys ---------------------------------------------------------------------------

    def scope_keys(self, scope: str, now: float) -> list[Arg]:
        """The five keys of a scope ("k:<name>" or "d:<name>"), in the scripts' order.
        The name comes last so that no two scopes' keys can ever coincide."""
        tag = self.tag
        return [
            f"{tag}w:{scope}",
            f"{tag}f:{scope}",
            f"{tag}d:{day_of(now)}:{scope}",
            f"{tag}m:{month_of(now)}:{scope}",
            f"{tag}c:{scope}",
        ]

    def key(self, *parts: str) -> str:
        return self.tag + ":".join(parts)

    # -- scripts ------------------------------------------------------------------------

    async def run(self, script: Script, keys: list[Arg], args: list[Arg]) -> Reply:
        try:
            return await self.client.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except RedisReplyError as exc:
            if exc.code != "NOSCRIPT":
                raise
        # The server has not seen it yet (a restart, a failover): EVAL loads it as well.
        return await self.client.call("EVAL", script.source, len(keys), *keys, *args)

    def admit_command(self, ticket: Ticket) -> tuple[list[Arg], list[Arg]]:
        now = ticket.now
        keys: list[Arg] = [self.key("claim", ticket.request_id), self.key("held", ticket.request_id)]
        args: list[Arg] = [
            repr(now),
            ticket.request_id,
            self.daemon,
            int(self.claim_s * 1000) if ticket.claim else 0,
            repr(self.hold_s),
            ticket.tokens,
            repr(day_end(day_of(now))),
            repr(month_end(month_of(now))),
            "1" if ticket.key else "0",
            len(ticket.candidates),
        ]
        keys += self.scope_keys("k:" + ticket.key, now)
        args += _limits_args(ticket.key_limits) if ticket.key else _NO_LIMITS_ARGS
        for candidate in ticket.candidates:
            keys += self.scope_keys("d:" + candidate.name, now)
            args += _limits_args(candidate.limits)
        return keys, args

    # -- the contract -------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> Decision:
        keys, args = self.admit_command(ticket)
        reply = _list(await self.run(SCRIPTS["admit"], keys, args))
        return decision(ticket, reply)

    async def settle(self, settlement: Settlement, *, admitted_locally: bool = False) -> None:
        keys, args = self.settle_command(settlement, admitted_locally=admitted_locally)
        await self.run(SCRIPTS["settle"], keys, args)

    def settle_command(self, settlement: Settlement, *, admitted_locally: bool = False) -> tuple[list[Arg], list[Arg]]:
        now = settlement.now
        rid = settlement.request_id
        keys: list[Arg] = [self.key("held", rid), self.key("settled", rid)]
        keys += self.scope_keys("k:" + settlement.key, now)
        keys += self.scope_keys("d:" + (settlement.deployment or ""), now)
        args: list[Arg] = [
            rid,
            repr(now),
            settlement.tokens,
            "" if settlement.cost_usd is None else repr(settlement.cost_usd),
            repr(self.hold_s),
            repr(day_end(day_of(now))),
            repr(month_end(month_of(now))),
            "1" if settlement.key else "0",
            "1" if settlement.deployment else "0",
            "1" if admitted_locally else "0",
        ]
        return keys, args

    def settle_evalsha(self, settlement: Settlement, *, admitted_locally: bool = False) -> tuple[Arg, ...]:
        """The settle script as one command, for a pipeline (`send`)."""
        keys, args = self.settle_command(settlement, admitted_locally=admitted_locally)
        return ("EVALSHA", SCRIPTS["settle"].sha, len(keys), *keys, *args)

    async def settle_many(self, settlements: list[tuple[Settlement, bool]]) -> list[Reply]:
        """Several settlements (each with whether it was admitted locally) in one round
        trip; each reply is 1 (counted now) or 0 (settled before), or an error reply."""
        return await self.send([self.settle_evalsha(s, admitted_locally=local) for s, local in settlements])

    async def send(self, commands: list[tuple[Arg, ...]]) -> list[Reply]:
        """Commands in one pipeline; those a server without the settle script answered
        NOSCRIPT go again once it is loaded (only those: the others ran)."""
        replies = await self.client.pipeline(commands)
        again = [i for i, r in enumerate(replies) if isinstance(r, ErrorReply) and r.code == "NOSCRIPT"]
        if again:
            await self.client.call("SCRIPT", "LOAD", SCRIPTS["settle"].source)
            for i, reply in zip(again, await self.client.pipeline([commands[i] for i in again]), strict=True):
                replies[i] = reply
        return replies

    async def release(self, request_id: str, key: str, deployment: str | None, estimated_tokens: int) -> None:
        keys: list[Arg] = [self.key("held", request_id), self.key("settled", request_id)]
        # The release script reads only the windows and in-flight sets, which do not
        # depend on the day: any `now` names them.
        keys += self.scope_keys("k:" + key, 0.0)
        keys += self.scope_keys("d:" + (deployment or ""), 0.0)
        args: list[Arg] = [request_id, repr(self.hold_s), "1" if key else "0", "1" if deployment else "0"]
        await self.run(SCRIPTS["release"], keys, args)

    async def failure(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        scope = "d:" + deployment
        member = f"{now!r}:{self.daemon}:{self._nonce}:{next(self._failures)}"
        reply = await self.run(
            SCRIPTS["failure"],
            [self.key("x", scope), self.key("c", scope)],
            [repr(now), threshold, repr(window_s), repr(cooldown_s), member],
        )
        return reply == 1

    async def cooldown(self, deployment: str, until: float, now: float | None = None) -> None:
        """`now` (the wall clock by default) only bounds how long the key lives."""
        await self.run(SCRIPTS["cooldown"], [self.key("c", "d:" + deployment)], [repr(until), repr(now or time.time())])

    async def use(self, scopes: list[str], now: float) -> list[ScopeUse]:
        if not scopes:
            return []
        keys: list[Arg] = []
        for name in scopes:
            kind, _, ident = name.partition(":")
            keys += self.scope_keys(("k:" if kind == "key" else "d:") + ident, now)
        rows = _list(await self.run(SCRIPTS["use"], keys, [repr(now)]))
        found: list[ScopeUse] = []
        for name, row in zip(scopes, rows, strict=True):
            reqs, toks, flying, usd_day, usd_month, cool = (_text(v) for v in _list(row))
            found.append(
                ScopeUse(
                    name,
                    requests_last_minute=max(int(reqs), 0),
                    tokens_last_minute=max(int(toks), 0),
                    in_flight=int(flying),
                    usd_today=float(usd_day),
                    usd_this_month=float(usd_month),
                    cooldown_until=float(cool) if cool else None,
                )
            )
        return found

    def health(self) -> StoreHealth:
        client = self.client
        if client.is_connected:
            return StoreHealth(kind="redis", extra={"url": client.target.redacted()})
        return StoreHealth(
            kind="redis", degraded=True, reason=client.last_error, extra={"url": client.target.redacted()}
        )


# -- the admit script's answer as the contract's decision ---------------------------------


def decision(ticket: Ticket, reply: list[Reply]) -> Decision:
    tag = _text(reply[0])
    if tag == "D":
        return Duplicate(_text(reply[1]))
    if tag == "A":
        chosen = int(_text(reply[1]))
        skipped = _skipped(ticket, reply[2], reply[3])
        return Admitted(None if chosen < 0 else chosen, skipped)
    if tag == "R":
        return refusal(ticket, None, _list(reply[1]))
    if tag == "C":
        best: Refused | None = None
        for index, record in zip(_list(reply[1]), _list(reply[2]), strict=True):
            best = _soonest(best, refusal(ticket, int(_text(index)), _list(record)))
        if best is None:
            raise StoreError("the admit script refused every candidate of an empty list")
        return best
    raise StoreError(f"unexpected answer from the admit script: {tag[:20]!r}")


def _skipped(ticket: Ticket, indexes: Reply, records: Reply) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for index, record in zip(_list(indexes), _list(records), strict=True):
        kind = _text(_list(record)[0])
        why = {"day": "budget", "month": "budget", "tpm_never": "tpm"}.get(kind, kind)
        out.append((ticket.candidates[int(_text(index))].name, why))
    return tuple(out)


def refusal(ticket: Ticket, candidate: int | None, record: list[Reply]) -> Refused:
    """The sentence and numbers of one refusal (the memory store's words for the same)."""
    kind = _text(record[0])
    values = [_text(v) for v in record[1:]]
    if candidate is None:
        what, limits = f"key {ticket.key!r}", ticket.key_limits
    else:
        chosen = ticket.candidates[candidate]
        what, limits = f"deployment {chosen.name!r}", chosen.limits
    if kind == "cooldown":
        wait = float(values[0])
        return Refused(
            "unavailable",
            f"{what} is cooling down after failing; retry in {wait:.1f} s",
            what,
            retry_after_s=round(wait, 3),
        )
    if kind in ("day", "month"):
        spent, resets = float(values[0]), float(values[1])
        period, budget = (
            ("today", f"usd_per_day = {limits.usd_per_day:g}")
            if kind == "day"
            else ("this month", f"usd_per_month = {limits.usd_per_month:g}")
        )
        return Refused(
            "quota_exceeded",
            f"{what} has spent ${spent:.4f} {period}, its budget ({budget}); it resets at {_utc(resets)}",
            what,
            resets_at=resets,
        )
    if kind == "parallel":
        return Refused(
            "rate_limit",
            f"{what} has {values[0]} requests running, its limit (parallel = {limits.parallel}); "
            "submit again when one has ended",
            what,
            retry_after_s=PARALLEL_RETRY_S,
        )
    if kind == "rpm":
        wait = float(values[1])
        return Refused(
            "rate_limit",
            f"{what} has made {values[0]} requests in the last minute, its limit (rpm = {limits.rpm}); "
            f"retry in {wait:.1f} s",
            what,
            retry_after_s=round(wait, 3),
        )
    if kind == "tpm_never":
        return Refused(
            "rate_limit",
            f"this request's estimated {ticket.tokens} tokens exceed {what}'s whole limit (tpm = {limits.tpm}): "
            "it can never be admitted; ask for fewer output tokens or send less",
            what,
        )
    if kind == "tpm":
        wait = float(values[1])
        return Refused(
            "rate_limit",
            f"{what} has used {values[0]} tokens in the last minute and this request needs about "
            f"{ticket.tokens}, over its limit (tpm = {limits.tpm}); retry in {wait:.1f} s",
            what,
            retry_after_s=round(wait, 3),
        )
    raise StoreError(f"unexpected refusal from the admit script: {kind[:20]!r}")


def _soonest(current: Refused | None, new: Refused) -> Refused:
    """The memory store's rule: the refusal that frees soonest (a budget's last)."""
    if current is None:
        return new
    if new.retry_after_s is not None and (current.retry_after_s is None or new.retry_after_s < current.retry_after_s):
        return new
    return current


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
