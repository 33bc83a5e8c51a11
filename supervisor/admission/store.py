"""The store every admission decision is made against, and the values it trades in.

One `admit` decides a request in one step (one Redis round trip when the store is
shared): the client key's limits and budgets, the first deployment among the
candidates that is neither cooling down nor at its own limits, and the claim of the
request id. `settle` records what the request really cost once it ended, `release`
gives back what an admitted request that never ran held. The memory store and the
Redis store implement the same semantics; `tests/supervisor/admission/` runs one
conformance suite against both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits of one scope (a client key, or a deployment); None: no limit.
    `rpm` and `tpm` are over the last 60 seconds (a sliding window), `parallel`
    counts admitted requests not yet settled or released; the budgets are USD spent
    in the current UTC day and UTC month."""

    rpm: int | None = None
    tpm: int | None = None
    parallel: int | None = None
    usd_per_day: float | None = None
    usd_per_month: float | None = None
    #: No limit at all (worked out once, like the two below: admission asks for every request).
    empty: bool = field(init=False, compare=False, default=True)
    #: A budget is set (a day's or a month's).
    budgeted: bool = field(init=False, compare=False, default=False)
    #: A rate is limited (`rpm` or `tpm`).
    rated: bool = field(init=False, compare=False, default=False)

    def __post_init__(self) -> None:
        budgeted = self.usd_per_day is not None or self.usd_per_month is not None
        rated = self.rpm is not None or self.tpm is not None
        # frozen: set once, here
        object.__setattr__(self, "budgeted", budgeted)
        object.__setattr__(self, "rated", rated)
        object.__setattr__(self, "empty", not budgeted and not rated and self.parallel is None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A deployment that may serve the request, in the order of preference the
    selection chose. `name` is the deployment's id (unique in the config)."""

    name: str
    limits: Limits = Limits()


@dataclass(slots=True)
class Ticket:
    """One request asking to be admitted. `key`: the client key's name ("" for a
    connection with no named key: no key limits apply, and `key_limits` is empty).
    `candidates`: empty when the request names a plain provider model (no route).
    `tokens`: the estimate of input + output tokens counted against `tpm` now and
    corrected by `settle`. `now`: wall-clock seconds (time.time()), so that daemons
    sharing a store agree on windows, days and months."""

    request_id: str
    key: str
    key_limits: Limits
    candidates: tuple[Candidate, ...]
    tokens: int
    now: float
    # Not frozen, like every value built per request here: a frozen dataclass costs
    # several microseconds more to build, and a submit builds one.
    #: Claim the request id for this daemon (False: the caller knows it is new, or
    #: idempotency is not shared).
    claim: bool = True


@dataclass(slots=True)
class Admitted:
    """`deployment`: the index in `Ticket.candidates` that took it (None without candidates)."""

    deployment: int | None
    #: Candidates skipped before it, each with why ("cooldown", "rpm", "tpm", "parallel").
    skipped: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Refused:
    """Over a limit (`rate_limit`, with `retry_after_s`) or a budget (`quota_exceeded`,
    with `resets_at`: the wall-clock second the budget's day or month ends). `scope`
    names what refused: "key:<name>" or "deployment:<name>" (every candidate refused:
    the one freeing soonest). `message` is the sentence a client is shown."""

    error_class: Literal["rate_limit", "quota_exceeded", "unavailable"]
    message: str
    scope: str
    retry_after_s: float | None = None
    resets_at: float | None = None


@dataclass(slots=True)
class Duplicate:
    """The request id was already claimed by `daemon` (this daemon's id, or another's)."""

    daemon: str


Decision = Admitted | Refused | Duplicate

#: `ErrorInfo.provider_code` prefix of a submit refused inside the daemon because another
#: daemon claimed its id (followed by that daemon's id): turned into following it, never
#: shown to a client.
CLAIMED_BY = "claimed_by:"


@dataclass(slots=True)
class Settlement:
    """What an admitted request really cost. `tokens`: the real input + output count
    (the difference from the ticket's estimate corrects `tpm`); `cost_usd`: the
    daemon's computed cost, None when unknown (nothing is added to the budgets)."""

    request_id: str
    key: str
    deployment: str | None
    estimated_tokens: int
    tokens: int
    cost_usd: float | None
    now: float


@dataclass(slots=True)
class ScopeUse:
    """A scope's use now, for `status` and the metrics."""

    scope: str
    requests_last_minute: int = 0
    tokens_last_minute: int = 0
    in_flight: int = 0
    usd_today: float = 0.0
    usd_this_month: float = 0.0
    cooldown_until: float | None = None


@dataclass(slots=True)
class StoreHealth:
    """`kind`: "memory" or "redis"; `degraded`: a shared store that is unreachable, so
    the daemon decides on its local view (`reason` says why, `since` when)."""

    kind: Literal["memory", "redis"]
    degraded: bool = False
    reason: str | None = None
    since: float | None = None
    daemons: int = 1
    extra: dict[str, str] = field(default_factory=dict)


class AdmissionStore(Protocol):
    """What the router and the relay call. `admit` is async because a shared store
    needs a round trip; the memory store never awaits (so a submit stays answered in
    the same step). Every method is atomic with respect to the others, on every
    daemon sharing the store."""

    async def admit(self, ticket: Ticket) -> Decision: ...

    async def settle(self, settlement: Settlement) -> None: ...

    async def release(self, request_id: str, key: str, deployment: str | None, estimated_tokens: int) -> None: ...

    async def failure(self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float) -> bool:
        """Count one failure of a deployment; True when this one put it in cooldown
        (`threshold` failures within `window_s`: cooled for `cooldown_s`)."""
        ...

    async def cooldown(self, deployment: str, until: float) -> None:
        """Cool a deployment down until `until` (an upstream 429 with Retry-After, say)."""
        ...

    async def use(self, scopes: list[str], now: float) -> list[ScopeUse]: ...

    def health(self) -> StoreHealth: ...
