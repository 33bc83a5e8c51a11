"""The admission store in the daemon's memory: the embedded default, and what a daemon
whose shared store is unreachable decides on meanwhile.

Nothing here awaits: `admit_now` answers in the step that asked, so a submit stays one
synchronous pass through the router. The async methods exist to share the contract
with the Redis store.
"""

from __future__ import annotations

import calendar
import time
from collections import deque

from .store import (
    Admitted,
    Candidate,
    Decision,
    Duplicate,
    Limits,
    Refused,
    ScopeUse,
    Settlement,
    StoreHealth,
    Ticket,
)

#: Seconds in the rate windows: `rpm` and `tpm` count the current second and the 59 before.
WINDOW_S = 60
#: How long a parallel slot is assumed to take to free when one is asked for (unknown).
PARALLEL_RETRY_S = 1.0
#: The second of a bucket that has left the window.
GONE = -1


def day_of(now: float) -> int:
    return int(now // 86400)


def month_of(now: float) -> int:
    t = time.gmtime(now)
    return t.tm_year * 12 + t.tm_mon - 1


def day_end(day: int) -> float:
    return float((day + 1) * 86400)


def month_end(month: int) -> float:
    year, index = divmod(month + 1, 12)
    return float(calendar.timegm((year, index + 1, 1, 0, 0, 0)))


class Scope:
    """One client key's or deployment's counters."""

    __slots__ = (
        "buckets",
        "cooldown_until",
        "day",
        "failures",
        "in_flight",
        "last",
        "month",
        "requests",
        "tokens",
        "usd_day",
        "usd_month",
    )

    def __init__(self) -> None:
        #: [second, requests, tokens], oldest first; only seconds of the window stay.
        self.buckets: deque[list[int]] = deque()
        #: The newest bucket (one gone before any: the next request makes one).
        self.last: list[int] = [GONE, 0, 0]
        self.requests = 0
        self.tokens = 0
        self.in_flight = 0
        self.day = -1
        self.usd_day = 0.0
        self.month = -1
        self.usd_month = 0.0
        self.cooldown_until = 0.0
        self.failures: deque[float] = deque()

    def expire(self, second: int) -> None:
        buckets = self.buckets
        oldest = second - WINDOW_S
        while buckets and buckets[0][0] <= oldest:
            bucket = buckets.popleft()
            self.requests -= bucket[1]
            self.tokens -= bucket[2]
            bucket[0] = GONE  # a hold's later correction of it changes nothing

    def take(self, second: int, tokens: int) -> list[int]:
        """Count one request of `tokens` in `second`, in flight; its bucket, which the
        request's settlement corrects."""
        last = self.last
        if last[0] == second:
            last[1] += 1
            last[2] += tokens
        else:
            last = self.last = [second, 1, tokens]
            self.buckets.append(last)
        self.requests += 1
        self.tokens += tokens
        self.in_flight += 1
        return last

    def correct(self, bucket: list[int], requests: int, tokens: int) -> None:
        """Change what was counted in `bucket` (one `take` gave), if it is still in the window."""
        if bucket[0] != GONE:
            bucket[1] += requests
            bucket[2] += tokens
            self.requests += requests
            self.tokens += tokens

    def freed_after(self, now: float, requests: int, tokens: int) -> float:
        """Seconds until enough of the window has left for `requests` and `tokens` more
        to fit (the caller knows they do not fit now)."""
        need_requests, need_tokens = requests, tokens
        for second, r, t in self.buckets:
            need_requests -= r
            need_tokens -= t
            if need_requests <= 0 and need_tokens <= 0:
                return max(second + WINDOW_S - now, 0.001)
        return float(WINDOW_S)

    def settle(self, bucket: list[int], delta: int, cost: float | None, now: float) -> None:
        """A request counted in `bucket` ended: `delta` tokens more than its estimate, `cost` USD."""
        self.in_flight -= 1
        if delta and bucket[0] != GONE:
            bucket[2] += delta
            self.tokens += delta
        if cost:
            self.spend(now, cost)

    def spent(self, now: float) -> tuple[float, float]:
        """USD spent today and this month (UTC); a month can only turn with a day."""
        day = day_of(now)
        if day != self.day:
            self.day, self.usd_day = day, 0.0
            month = month_of(now)
            if month != self.month:
                self.month, self.usd_month = month, 0.0
        return self.usd_day, self.usd_month

    def spend(self, now: float, usd: float) -> None:
        self.spent(now)
        self.usd_day += usd
        self.usd_month += usd


def _over(
    scope: Scope, limits: Limits, now: float, second: int, tokens: int, kind: str, name: str
) -> Refused | str | None:
    """Why `scope` (`kind` `name`) cannot take one more request of `tokens`: a refusal
    for a budget, the limit's name for a rate or parallel limit (the caller words it),
    or None. Words are made only for a refusal: this runs for every request."""
    if limits.budgeted:
        usd_day, usd_month = scope.spent(now) if now // 86400 != scope.day else (scope.usd_day, scope.usd_month)
        if limits.usd_per_day is not None and usd_day >= limits.usd_per_day:
            what = f"{kind} {name!r}"
            resets = day_end(scope.day)
            return Refused(
                "quota_exceeded",
                f"{what} has spent ${usd_day:.4f} today, its budget (usd_per_day = {limits.usd_per_day:g}); "
                f"it resets at {_utc(resets)}",
                what,
                resets_at=resets,
            )
        if limits.usd_per_month is not None and usd_month >= limits.usd_per_month:
            what = f"{kind} {name!r}"
            resets = month_end(scope.month)
            return Refused(
                "quota_exceeded",
                f"{what} has spent ${usd_month:.4f} this month, its budget (usd_per_month = "
                f"{limits.usd_per_month:g}); it resets at {_utc(resets)}",
                what,
                resets_at=resets,
            )
    if limits.rated:
        buckets = scope.buckets
        if buckets and buckets[0][0] <= second - WINDOW_S:
            scope.expire(second)
        rpm, tpm = limits.rpm, limits.tpm
        if rpm is not None and scope.requests >= rpm:
            return "rpm"
        if tpm is not None and scope.tokens + tokens > tpm:
            return "tpm"
    parallel = limits.parallel
    if parallel is not None and scope.in_flight >= parallel:
        return "parallel"
    return None


def _rate_refusal(scope: Scope, limits: Limits, which: str, what: str, now: float, tokens: int) -> Refused:
    if which == "parallel":
        return Refused(
            "rate_limit",
            f"{what} has {scope.in_flight} requests running, its limit (parallel = {limits.parallel}); "
            "submit again when one has ended",
            what,
            retry_after_s=PARALLEL_RETRY_S,
        )
    if which == "rpm":
        wait = scope.freed_after(now, scope.requests + 1 - (limits.rpm or 0), 0)
        return Refused(
            "rate_limit",
            f"{what} has made {scope.requests} requests in the last minute, its limit (rpm = {limits.rpm}); "
            f"retry in {wait:.1f} s",
            what,
            retry_after_s=round(wait, 3),
        )
    tpm = limits.tpm or 0
    if tokens > tpm:
        return Refused(
            "rate_limit",
            f"this request's estimated {tokens} tokens exceed {what}'s whole limit (tpm = {tpm}): "
            "it can never be admitted; ask for fewer output tokens or send less",
            what,
        )
    wait = scope.freed_after(now, 0, scope.tokens + tokens - tpm)
    return Refused(
        "rate_limit",
        f"{what} has used {scope.tokens} tokens in the last minute and this request needs about {tokens}, "
        f"over its limit (tpm = {tpm}); retry in {wait:.1f} s",
        what,
        retry_after_s=round(wait, 3),
    )


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


#: What an admitted request holds until it is settled or released: the scopes it was
#: counted in (its key's, its deployment's; None for none), the bucket `Scope.take`
#: gave in each, and its estimated tokens. A tuple: one is made for every request.
_Held = tuple[Scope | None, list[int], Scope | None, list[int], int]
#: The bucket of a scope a request was not counted in.
_NO_BUCKET = [GONE, 0, 0]
#: The decision of a ticket admitted with nothing skipped, by candidate index (shared:
#: no one changes a decision).
_ADMITTED: dict[int | None, Admitted] = {i: Admitted(i) for i in (None, *range(8))}


class MemoryStore:
    """`AdmissionStore` in this process. `daemon`: this daemon's id (claims name it);
    `claim_s`: how long a request id stays claimed (`replay.keep_s`)."""

    kind = "memory"

    def __init__(self, *, daemon: str = "local", claim_s: float = 300.0, max_claims: int = 100_000) -> None:
        self.daemon = daemon
        self.claim_s = claim_s
        self.max_claims = max_claims
        self.keys: dict[str, Scope] = {}
        self.deployments: dict[str, Scope] = {}
        self.held: dict[str, _Held] = {}
        #: request id -> (daemon, until), oldest first (dicts keep insertion order).
        self.claims: dict[str, tuple[str, float]] = {}

    # -- the contract -------------------------------------------------------------------

    async def admit(self, ticket: Ticket) -> Decision:
        return self.admit_now(ticket)

    async def settle(self, settlement: Settlement) -> None:
        self.settle_now(settlement)

    async def release(self, request_id: str, key: str, deployment: str | None, estimated_tokens: int) -> None:
        self.release_now(request_id)

    async def failure(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        return self.failure_now(deployment, now, threshold=threshold, window_s=window_s, cooldown_s=cooldown_s)

    async def cooldown(self, deployment: str, until: float) -> None:
        self.cooldown_now(deployment, until)

    async def use(self, scopes: list[str], now: float) -> list[ScopeUse]:
        return self.use_now(scopes, now)

    def health(self) -> StoreHealth:
        return StoreHealth(kind="memory")

    # -- the same, answered at once -------------------------------------------------------

    def admit_now(self, ticket: Ticket) -> Decision:
        now = ticket.now
        request_id = ticket.request_id
        if ticket.claim:
            claimed = self.claims.get(request_id)
            if claimed is not None and claimed[1] > now:
                return Duplicate(claimed[0])
        second = int(now)
        tokens = ticket.tokens
        key_scope: Scope | None = None
        key = ticket.key
        if key:
            key_scope = self.keys.get(key)
            if key_scope is None:
                key_scope = self.keys[key] = Scope()
            limits = ticket.key_limits
            if not limits.empty:
                over = _over(key_scope, limits, now, second, tokens, "key", key)
                if over is not None:
                    if isinstance(over, Refused):
                        return over
                    return _rate_refusal(key_scope, limits, over, f"key {key!r}", now, tokens)
        chosen: int | None = None
        chosen_scope: Scope | None = None
        skipped: list[tuple[str, str]] | None = None
        refusal: Refused | None = None
        deployments = self.deployments
        for index, candidate in enumerate(ticket.candidates):
            name = candidate.name
            scope = deployments.get(name)
            if scope is None:
                scope = deployments[name] = Scope()
            if scope.cooldown_until > now:
                skipped = (skipped or []) + [(name, "cooldown")]
                refusal = _soonest(refusal, _cooling(candidate, scope.cooldown_until - now))
                continue
            limits = candidate.limits
            if not limits.empty:
                over = _over(scope, limits, now, second, tokens, "deployment", name)
                if over is not None:
                    refused = (
                        over
                        if isinstance(over, Refused)
                        else _rate_refusal(scope, limits, over, f"deployment {name!r}", now, tokens)
                    )
                    skipped = (skipped or []) + [(name, over if isinstance(over, str) else "budget")]
                    refusal = _soonest(refusal, refused)
                    continue
            chosen, chosen_scope = index, scope
            break
        if ticket.candidates and chosen is None:
            assert refusal is not None
            return refusal
        self.held[request_id] = (
            key_scope,
            key_scope.take(second, tokens) if key_scope is not None else _NO_BUCKET,
            chosen_scope,
            chosen_scope.take(second, tokens) if chosen_scope is not None else _NO_BUCKET,
            tokens,
        )
        if ticket.claim:
            self._claim(request_id, now)
        if skipped:
            return Admitted(chosen, tuple(skipped))
        return _ADMITTED.get(chosen) or Admitted(chosen)

    def settle_now(self, settlement: Settlement) -> None:
        self.settle_held(settlement.request_id, settlement.tokens, settlement.cost_usd, settlement.now)

    def settle_held(self, request_id: str, tokens: int, cost_usd: float | None, now: float) -> None:
        """`settle_now` of what the store holds for `request_id` (its key and deployment
        are held here), without a `Settlement` to make."""
        held = self.held.pop(request_id, None)
        if held is None:  # settled already, or never admitted here
            return
        key_scope, key_bucket, scope, bucket, estimated = held
        delta = tokens - estimated
        if key_scope is not None:
            key_scope.settle(key_bucket, delta, cost_usd, now)
        if scope is not None:
            scope.settle(bucket, delta, cost_usd, now)

    def release_now(self, request_id: str) -> None:
        held = self.held.pop(request_id, None)
        if held is None:
            return
        key_scope, key_bucket, scope, bucket, tokens = held
        if key_scope is not None:
            key_scope.in_flight -= 1
            key_scope.correct(key_bucket, -1, -tokens)
        if scope is not None:
            scope.in_flight -= 1
            scope.correct(bucket, -1, -tokens)

    def failure_now(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        scope = self.deployments.get(deployment)
        if scope is None:
            scope = self.deployments[deployment] = Scope()
        failures = scope.failures
        while failures and failures[0] <= now - window_s:
            failures.popleft()
        failures.append(now)
        if len(failures) >= threshold and scope.cooldown_until <= now:
            scope.cooldown_until = now + cooldown_s
            failures.clear()
            return True
        return False

    def cooldown_now(self, deployment: str, until: float) -> None:
        scope = self.deployments.get(deployment)
        if scope is None:
            scope = self.deployments[deployment] = Scope()
        scope.cooldown_until = max(scope.cooldown_until, until)

    def use_now(self, scopes: list[str], now: float) -> list[ScopeUse]:
        found: list[ScopeUse] = []
        second = int(now)
        for name in scopes:
            kind, _, ident = name.partition(":")
            scope = (self.keys if kind == "key" else self.deployments).get(ident)
            if scope is None:
                found.append(ScopeUse(name))
                continue
            scope.expire(second)
            usd_day, usd_month = scope.spent(now)
            found.append(
                ScopeUse(
                    name,
                    requests_last_minute=max(scope.requests, 0),
                    tokens_last_minute=max(scope.tokens, 0),
                    in_flight=scope.in_flight,
                    usd_today=usd_day,
                    usd_this_month=usd_month,
                    cooldown_until=scope.cooldown_until if scope.cooldown_until > now else None,
                )
            )
        return found

    # -- inside ---------------------------------------------------------------------------

    def _claim(self, request_id: str, now: float) -> None:
        claims = self.claims
        if len(claims) >= self.max_claims:
            # The oldest claims are the first to expire: let the expired ones go, and if
            # none has, the oldest (a bounded table beats an exact one under a flood).
            for old in list(claims)[: max(len(claims) // 8, 1)]:
                del claims[old]
        claims[request_id] = (self.daemon, now + self.claim_s)


def _cooling(candidate: Candidate, wait: float) -> Refused:
    return Refused(
        "unavailable",
        f"deployment {candidate.name!r} is cooling down after failing; retry in {wait:.1f} s",
        f"deployment {candidate.name!r}",
        retry_after_s=round(wait, 3),
    )


def _soonest(current: Refused | None, new: Refused) -> Refused:
    """Of two refusals, the one a client should hear: the one that frees soonest (a
    budget's, which frees only when it resets, last)."""
    if current is None:
        return new
    if new.retry_after_s is not None and (current.retry_after_s is None or new.retry_after_s < current.retry_after_s):
        return new
    return current
