"""The router's admission step for client keys and provider deployments, and the
settlement of every admitted request when it ends.

Built only when the config names client keys or limits a provider, or shares state
through Redis (`Gate.of` answers None otherwise, and the router then does nothing per
request). A request whose key and provider have nothing to count, and whose id needs
no claim, is let through without a ticket. A routed request is decided in the same
ticket as its key: the route's deployments, in selection's order, are its candidates. With
the memory store a submit is decided in the step that reads it (`admit_now`); with
a store that needs a round trip, `admit` hands back a coroutine the router awaits
before it answers, the request id held meanwhile (`pending`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from ...config.loader import Config, RateLimitsConfig
from ...protocol.messages import RETRYABLE, ErrorInfo, KeyUse, ModelInfo, Request
from ...protocol.tokens import estimate_request_tokens
from ..terminal import summary_of
from .memory import MemoryStore
from .store import CLAIMED_BY, AdmissionStore, Admitted, Candidate, Decision, Duplicate, Limits, Settlement, Ticket

if TYPE_CHECKING:
    from ..requests import RequestState

#: Output tokens a request is assumed to ask for when it sets no `max_tokens` (capped
#: by the model's own maximum): its tpm count is corrected by the usage at its end.
DEFAULT_OUTPUT_TOKENS = 4096

NO_LIMITS = Limits()


class KeyHooks(Protocol):
    """What the metrics count of client keys (`DaemonMetrics` implements it)."""

    def key_admitted(self, key: str) -> None: ...

    def key_refused(self, key: str, error_class: str) -> None: ...

    def key_ended(self, key: str, tokens: int, cost_usd: float | None) -> None: ...


class Held(msgspec.Struct, gc=False):
    """What an admitted request holds until it ends: settled, or released if its job
    never reached a worker. `ticket`: the id the store holds it under (the request id;
    a route's fallback is admitted anew under another, as a shared store settles an id
    once). A struct: one is made per admitted request, in C."""

    key: str
    deployment: str | None
    tokens: int
    ticket: str


def limits_of(
    rates: RateLimitsConfig | None, usd_per_day: float | None = None, usd_per_month: float | None = None
) -> Limits:
    if rates is None:
        return Limits(usd_per_day=usd_per_day, usd_per_month=usd_per_month)
    return Limits(rates.rpm, rates.tpm, rates.parallel, usd_per_day, usd_per_month)


class Gate:
    """Admission for the router, settlement for the relay. `keys`: each named key's
    limits (an empty `Limits`: counted, never refused); `deployments`: each limited
    provider's; `claim`: claim request ids in the store (a shared store: a request id
    sent to two daemons runs once)."""

    def __init__(
        self,
        store: AdmissionStore,
        keys: dict[str, Limits],
        deployments: dict[str, Limits],
        *,
        claim: bool = False,
        hooks: KeyHooks | None = None,
    ) -> None:
        self.store = store
        self.keys = keys
        self.deployments = deployments
        self.claim = claim
        self.hooks = hooks
        #: The provider's candidate, by provider (a provider used by name is a deployment).
        self.candidates: dict[str, tuple[Candidate, ...]] = {
            name: (Candidate(name, limits),) for name, limits in deployments.items()
        }
        # Where a tpm limit applies, a ticket carries the request's token estimate (else 0:
        # the usage at its end is counted all the same).
        self._tpm_keys = {name for name, limits in keys.items() if limits.tpm is not None}
        self._tpm_deployments = {name for name, limits in deployments.items() if limits.tpm is not None}
        #: A store that batches its settlements after the replies (the shared one) takes them here.
        self.settle_soon: Callable[[Settlement], None] | None = getattr(store, "settle_soon", None)
        # The memory store answers at once; any other store is awaited.
        self.admit_now = store.admit_now if isinstance(store, MemoryStore) else None
        #: Request ids whose admission is being awaited (a second submit of one is refused).
        self.pending: set[str] = set()
        self.nursery: trio.Nursery | None = None
        #: The routes' deployments, by id, shown in status beside the keys (the daemon sets them).
        self.route_deployments: dict[str, Limits] = {}
        #: Told of the candidates a ticket skipped, and why (the routes learn of cooldowns
        #: other daemons set); None without routes.
        self.on_skipped: Callable[[tuple[tuple[str, str], ...]], None] | None = None
        #: Gives back a hold and frees its request id's claim (shared state; the daemon sets it).
        self.unclaim: Callable[[str, str, str | None, int], Coroutine[Any, Any, None]] | None = None

    @classmethod
    def of(cls, config: Config, *, store: AdmissionStore | None = None, hooks: KeyHooks | None = None) -> Gate | None:
        """The gate for `config`, or None when it names no client key, limits no provider
        and shares no state (a shared store decides routes and claims request ids)."""
        keys = {
            name: limits_of(entry.limits, entry.budget.usd_per_day, entry.budget.usd_per_month)
            for name, entry in config.clients.items()
        }
        deployments = {
            name: limits_of(p.limits)
            for name, p in config.providers.items()
            if p.enabled and p.limits is not None and not limits_of(p.limits).empty
        }
        if not keys and not deployments and (store is None or isinstance(store, MemoryStore)):
            return None
        if store is None:
            store = MemoryStore(claim_s=config.replay.keep_s)
        return cls(store, keys, deployments, claim=not isinstance(store, MemoryStore), hooks=hooks)

    # -- admission ------------------------------------------------------------------------

    def admit(
        self,
        state: RequestState,
        request: Request,
        model: ModelInfo,
        key: str,
        route: tuple[Candidate, ...] | None = None,
        route_tpm: bool = False,
    ) -> ErrorInfo | Coroutine[Any, Any, ErrorInfo | None] | None:
        """None: admitted (or nothing to count); an error: refused, before any call; a
        coroutine: the store's answer, to await. `route`: a routed request's deployments,
        in the order to offer them (the one admitted is `state.admission.deployment`);
        `route_tpm`: one of them has a tpm limit."""
        key_limits = self.keys.get(key) if key else NO_LIMITS
        if key_limits is None:
            return _error("invalid_request", f"no client key is named {key!r} (clients: in the config)")
        candidates = self.candidates.get(state.provider, ()) if route is None else route
        if not key and not candidates and not self.claim:
            return None
        tokens = 0
        if key in self._tpm_keys or (route_tpm if route is not None else state.provider in self._tpm_deployments):
            tokens = estimated_tokens(request, model)
        ticket = Ticket(state.request_id, key, key_limits, candidates, tokens, time.time(), self.claim)
        if self.admit_now is not None:
            decision = self.admit_now(ticket)
            if isinstance(decision, Admitted) and not decision.skipped and (self.hooks is None or not key):
                # Most requests: held at once (what `_decided` does, without its call).
                index = decision.deployment
                deployment = candidates[index].name if index is not None else None
                state.admission = Held(key, deployment, tokens, ticket.request_id)
                return None
            return self._decided(decision, state, ticket)
        self.pending.add(ticket.request_id)  # now: the router runs the coroutine in a task of its own
        return self._admit_later(state, ticket)

    async def _admit_later(self, state: RequestState, ticket: Ticket) -> ErrorInfo | None:
        try:
            return self._decided(await self.store.admit(ticket), state, ticket)
        finally:
            self.pending.discard(ticket.request_id)

    def _decided(self, decision: Decision, state: RequestState, ticket: Ticket) -> ErrorInfo | None:
        key = ticket.key
        if isinstance(decision, Admitted):
            index = decision.deployment
            deployment = ticket.candidates[index].name if index is not None else None
            state.admission = Held(key, deployment, ticket.tokens, ticket.request_id)
            if decision.skipped and self.on_skipped is not None:
                self.on_skipped(decision.skipped)
            if self.hooks is not None and key:
                self.hooks.key_admitted(key)
            return None
        if isinstance(decision, Duplicate):
            refused = _error(
                "invalid_request",
                f"request_id {ticket.request_id!r} was already submitted (to daemon {decision.daemon}); "
                "its events are there: choose another id for a new request",
            )
            refused.provider_code = CLAIMED_BY + decision.daemon  # the shared requests follow it
            return refused
        if self.hooks is not None and key:
            self.hooks.key_refused(key, decision.error_class)
        return ErrorInfo(
            error_class=decision.error_class,
            message=decision.message,
            retryable=RETRYABLE[decision.error_class],
            retry_after_s=decision.retry_after_s,
            resets_at=decision.resets_at,
            provider=state.provider if decision.scope.startswith("deployment") else None,
        )

    # -- the end ------------------------------------------------------------------------

    def ended(self, state: RequestState) -> None:
        """The request ended, any way it can: what it holds is settled with its real usage
        and cost (from its terminal event), or released if its job never reached a worker."""
        held = state.admission
        if held is None:
            return
        state.admission = None
        if state.generation is None:
            self.release(held)
            return
        tokens, cost = summary_of(state).billed()
        store = self.store
        if isinstance(store, MemoryStore):
            store.settle_held(held.ticket, tokens, cost, time.time())  # no `Settlement` made to be read at once
        else:
            settlement = Settlement(held.ticket, held.key, held.deployment, held.tokens, tokens, cost, time.time())
            if self.settle_soon is not None:
                self.settle_soon(settlement)  # with the shared store's next batch: no round trip of its own
            elif self.nursery is not None:
                self.nursery.start_soon(store.settle, settlement)
        if self.hooks is not None and held.key:
            self.hooks.key_ended(held.key, tokens, cost)

    def release(self, held: Held) -> None:
        """Give back what a request that never ran held."""
        if isinstance(self.store, MemoryStore):
            self.store.release_now(held.ticket)
        elif self.nursery is not None:
            self.nursery.start_soon(self.store.release, held.ticket, held.key, held.deployment, held.tokens)
        if self.hooks is not None and held.key:
            self.hooks.key_ended(held.key, 0, None)

    def discard(self, state: RequestState) -> None:
        """The submit failed after admission (its job could not be queued, its keys all
        rest): what it holds is given back, and its id's claim too, so that the same
        request may be sent again."""
        held = state.admission
        if held is None:
            return
        state.admission = None
        if self.unclaim is not None and self.nursery is not None:
            self.nursery.start_soon(self.unclaim, held.ticket, held.key, held.deployment, held.tokens)
            if self.hooks is not None and held.key:
                self.hooks.key_ended(held.key, 0, None)
            return
        self.release(held)

    # -- use ------------------------------------------------------------------------------

    def scopes(self) -> list[str]:
        return (
            [f"key:{name}" for name in self.keys]
            + [f"deployment:{name}" for name in self.deployments]
            + [f"deployment:{name}" for name in self.route_deployments if name not in self.deployments]
        )

    def use_now(self) -> list[KeyUse] | None:
        """Each key's and limited deployment's use, or None when the store must be awaited (`use`)."""
        if not isinstance(self.store, MemoryStore):
            return None
        return self._shown(self.store.use_now(self.scopes(), time.time()))

    async def use(self) -> list[KeyUse]:
        return self._shown(await self.store.use(self.scopes(), time.time()))

    def _shown(self, found: Iterable[Any]) -> list[KeyUse]:
        out: list[KeyUse] = []
        for use in found:
            kind, _, name = use.scope.partition(":")
            if kind == "key":
                limits = self.keys.get(name, NO_LIMITS)
            else:
                limits = self.deployments.get(name) or self.route_deployments.get(name, NO_LIMITS)
            out.append(
                KeyUse(
                    scope="key" if kind == "key" else "deployment",
                    name=name,
                    requests_last_minute=use.requests_last_minute,
                    tokens_last_minute=use.tokens_last_minute,
                    in_flight=use.in_flight,
                    usd_today=round(use.usd_today, 6),
                    usd_this_month=round(use.usd_this_month, 6),
                    rpm=limits.rpm,
                    tpm=limits.tpm,
                    parallel=limits.parallel,
                    usd_per_day=limits.usd_per_day,
                    usd_per_month=limits.usd_per_month,
                    cooldown_until=use.cooldown_until,
                )
            )
        return out


def estimated_tokens(request: Request, model: ModelInfo) -> int:
    """The tokens a request is counted for at admission: its prompt's estimate plus the
    output it may ask for (`max_tokens`, else a default), within the model's maximum."""
    output = request.max_tokens if request.max_tokens is not None else DEFAULT_OUTPUT_TOKENS
    if model.max_output is not None:
        output = min(output, model.max_output)
    return estimate_request_tokens(request) + max(output, 0)


def _error(error_class: Any, message: str) -> ErrorInfo:
    return ErrorInfo(error_class=error_class, message=message, retryable=RETRYABLE[error_class])
