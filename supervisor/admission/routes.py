"""Routes: a model name served by several deployments, in the order selection picks,
admitted by the store, handed to the next deployment when one fails before sending
anything (a fallback), and cooled down when it keeps failing (the circuit breaker).

The router asks `plan` (is this model a route, and which deployments, in which order)
and `admit` (which of them the store lets take the request); the relay hands over a
routed request's terminal frame (`fallback`: True when the request went on elsewhere,
so the frame is never published) and its end (`ended`: the store settled, the breaker
and the share told). Nothing here runs for a model named directly.

With a gate (client keys, limits, shared state), a routed request is decided in the
gate's ticket, with its key, on the gate's store (`take` builds its run from what that
ticket admitted), the gate settles it, and fallbacks, failures and cooldowns go to that
store too: with the shared one every daemon skips a deployment another cooled. A store
that must be awaited never blocks the relay: a fallback's error frame is withheld while
its admission runs in a task, then the job moves on or the frame goes out.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from ...config.catalog import Catalog
from ...config.loader import BreakerConfig, Config, provider_key_names
from ...protocol.codec import decode_event, split_frame
from ...protocol.messages import (
    RETRYABLE,
    ErrorEvent,
    ErrorInfo,
    FallbackInfo,
    Job,
    ModelInfo,
    RateLimit,
    Relay,
    Request,
    Submit,
    Timeouts,
)
from ...protocol.tokens import estimate_request_tokens
from ..terminal import Summary, summary_in, summary_of
from .gate import Held
from .memory import MemoryStore
from .selection import Option, Selector, Strategy
from .store import AdmissionStore, Admitted, Candidate, Decision, Limits, Refused, Settlement, Ticket

if TYPE_CHECKING:
    from ..metrics import DaemonMetrics
    from ..requests import RequestState, RequestTable
    from ..slot import WorkerSlot
    from .gate import Gate

log = logging.getLogger("trunkline.supervisor")

#: Below this share of its requests or tokens left (upstream rate-limit headers), a
#: deployment's weight is lowered in proportion, down to `MIN_SHARE` of it.
LOW_SHARE = 0.1
MIN_SHARE = 0.05
#: How long a lowered share holds when the provider did not say when its window resets.
SHARE_HOLD_S = 60.0
#: Slot states in which a deployment is skipped at submit, like one cooling down.
_CANNOT_SERVE = ("not_configured", "unavailable")
#: The key limits of a route's ticket until client keys come (none).
_NO_KEY_LIMITS = Limits()
#: Characters of a failed deployment's error message kept on the response's `fallbacks`.
FALLBACK_MESSAGE_CHARS = 500
#: How often a daemon on a shared store reads its deployments' cooldowns (those other
#: daemons set), to offer them last; the store skips them whatever this daemon knows.
COOLING_READ_S = 2.0


class AdmitsNow(Protocol):
    """The store's synchronous twins (the memory store's), which a submit calls so that
    it stays one step."""

    def admit_now(self, ticket: Ticket) -> Decision: ...

    def settle_now(self, settlement: Settlement) -> None: ...

    def settle_held(self, request_id: str, tokens: int, cost_usd: float | None, now: float) -> None: ...

    def release_now(self, request_id: str) -> None: ...

    def failure_now(
        self, deployment: str, now: float, *, threshold: int, window_s: float, cooldown_s: float
    ) -> bool: ...

    def cooldown_now(self, deployment: str, until: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Deployment:
    id: str
    provider: str
    info: ModelInfo
    limits: Limits
    #: Index of its `key_env` among the provider's keys (`Job.key_index`); None without
    #: one: the provider's keys are then used in turn, as for a request naming no route.
    key_index: int | None
    #: The provider's whole-request timeout, which bounds a request's fallbacks too.
    request_s: float
    #: What the admission ticket names it as (made once, not per request).
    candidate: Candidate
    #: Its requests in flight are counted (`Routing.busy`): its route picks the least busy.
    busy_counted: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    strategy: Strategy
    deployments: tuple[Deployment, ...]
    selector: Selector
    fallback: bool
    fallback_on: frozenset[str]
    breaker: BreakerConfig
    #: A deployment has a `tpm` limit: the request's tokens are estimated for it.
    needs_tokens: bool
    #: The plan of each of the selector's `static` orders, made once (set by `build_routes`).
    plans: tuple[Plan, ...] = field(default=(), repr=False, compare=False)
    #: The providers of its deployments, each once (whose workers a plan needs).
    providers: tuple[str, ...] = ()


def build_routes(config: Config, catalog: Catalog) -> dict[str, Route]:
    """The configured routes with each deployment's model resolved (the loader checked
    that every one resolves and every id is set)."""
    routes: dict[str, Route] = {}
    for name, route in config.routes.items():
        deployments = []
        for d in route.deployments:
            assert d.id is not None  # the loader gives each its default
            provider = config.providers[d.provider]
            keys = provider_key_names(provider)
            deployments.append(
                Deployment(
                    id=d.id,
                    provider=d.provider,
                    info=catalog.resolve(d.model, d.provider),
                    limits=Limits(rpm=d.limits.rpm, tpm=d.limits.tpm, parallel=d.limits.parallel),
                    key_index=keys.index(d.key_env) if d.key_env in keys else None,
                    request_s=config.provider_timeouts(d.provider).request_s,
                    candidate=Candidate(d.id, Limits(rpm=d.limits.rpm, tpm=d.limits.tpm, parallel=d.limits.parallel)),
                    busy_counted=route.strategy == "least_busy",
                )
            )
        routes[name] = built = Route(
            name=name,
            strategy=route.strategy,
            deployments=tuple(deployments),
            selector=Selector(
                route.strategy,
                [Option(d.id, c.weight, c.priority) for d, c in zip(deployments, route.deployments, strict=True)],
            ),
            fallback=route.fallback,
            fallback_on=frozenset(route.fallback_on),
            breaker=route.breaker,
            needs_tokens=any(d.limits.tpm is not None for d in route.deployments),
            providers=tuple(dict.fromkeys(d.provider for d in deployments)),
        )
        plans = tuple(Plan.of(built, [built.deployments[i] for i in order]) for order in built.selector.static)
        object.__setattr__(built, "plans", plans)  # frozen: set once, here (a plan names its route)
    return routes


class RouteRun(msgspec.Struct):
    """One routed request: the deployment serving it now, those left to fall back on,
    those tried, and its time across all of them (`total_s`, from its submit: its
    deadline is worked out only when it would fall back). A struct: one is made per
    routed request, in C."""

    route: Route
    deployment: Deployment
    remaining: Sequence[Deployment]
    total_s: float
    tokens: int
    fallbacks: list[FallbackInfo] = msgspec.field(default_factory=list)
    #: A fallback's admission is being awaited: no deployment serves it meanwhile.
    moving: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """A route's deployments that can take a request now, in the order to offer them
    (`offered`: the same, as the admission ticket's candidates). Those of the selector's
    static orders are made once (`Route.plans`) and shared by the requests drawing them."""

    route: Route
    order: tuple[Deployment, ...]
    offered: tuple[Candidate, ...]
    #: The model of the first deployment offered.
    first: ModelInfo
    #: The deployments after the first (those a request the first takes may fall back on).
    rest: tuple[Deployment, ...]

    @classmethod
    def of(cls, route: Route, order: Sequence[Deployment]) -> Plan:
        return cls(route, tuple(order), tuple([d.candidate for d in order]), order[0].info, tuple(order[1:]))

    def candidates(self) -> tuple[Candidate, ...]:
        return self.offered


class Routing:
    """The routes of the running config and what this daemon knows of their deployments:
    requests in flight, cooldowns, shares lowered by upstream rate-limit headers.
    `store`: its own, when no `gate` decides routed requests (with one: the gate's)."""

    def __init__(
        self,
        routes: dict[str, Route],
        store: AdmitsNow,
        *,
        slots: Mapping[str, WorkerSlot],
        requests: RequestTable,
        bus: Callable[..., None],
        metrics: DaemonMetrics | None = None,
        rng: random.Random | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.routes = routes
        self.store = store
        #: Decides routed requests with their key, in one ticket, and settles them.
        self.gate = gate
        #: The gate's store when it must be awaited (shared): fallbacks, failures and
        #: cooldowns then go to it in tasks; None: `store` answers at once.
        self.later: AdmissionStore | None = None
        if gate is not None:
            if isinstance(gate.store, MemoryStore):
                self.store = gate.store
            else:
                self.later = gate.store
            gate.on_skipped = self.skipped
        #: The relay's entry, where a withheld terminal frame goes back (the daemon sets it).
        self.deliver: Callable[[Relay], None] | None = None
        self.slots = slots
        self.requests = requests
        self.bus = bus
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.busy: dict[str, int] = {}
        #: Deployment id -> wall-clock second its cooldown ends (as this daemon knows it).
        self.cooling: dict[str, float] = {}
        #: Deployment id -> (weight factor, wall-clock second it holds until).
        self.share: dict[str, tuple[float, float]] = {}

    # -- submit ---------------------------------------------------------------------------

    def plan(self, msg: Submit) -> Plan | ErrorInfo | None:
        """None when the request does not name a route; else its deployments whose
        provider can serve now, in selection's order (those cooling down last), or why
        none can."""
        request = msg.request
        if request.provider is not None:
            return None
        route = self.routes.get(request.model)
        if route is None:
            return None
        # What this daemon knows of cooldowns and shares is looked at only when it knows any.
        cooling: set[str] | None = None
        share: dict[str, float] | None = None
        if self.cooling or self.share:
            now = time.time()
            cooling = {d.id for d in route.deployments if self.cooling.get(d.id, 0.0) > now}
            share = {d.id: s[0] for d in route.deployments if (s := self.share.get(d.id)) is not None and s[1] > now}
        if not cooling and not share:
            # Most requests: one of the orders made at start, taken whole when every
            # deployment's worker can serve.
            at = route.selector.draw(self.rng, self.busy)
            if at >= 0:
                plan = route.plans[at]
                slots = self.slots
                for provider in route.providers:
                    slot = slots.get(provider)
                    if slot is None or slot.state in _CANNOT_SERVE:
                        return self._ready(route, plan.order)
                return plan
        deployments = route.deployments
        order = route.selector.order(self.rng, busy=self.busy, cooling=cooling or set(), share=share)
        return self._ready(route, [deployments[i] for i in order])

    def _ready(self, route: Route, order: Sequence[Deployment]) -> Plan | ErrorInfo:
        """The plan of those of `order` whose provider can serve now, or why none can."""
        slots = self.slots
        ready = []
        for deployment in order:
            slot = slots.get(deployment.provider)
            if slot is not None and slot.state not in _CANNOT_SERVE:
                ready.append(deployment)
        if not ready:
            why = "; ".join(f"{d.id}: {self._state_of(d)}" for d in route.deployments)
            return _error("unavailable", f"no deployment of route {route.name!r} can serve now ({why})")
        return Plan.of(route, ready)

    def admit(self, plan: Plan, request_id: str, request: Request) -> RouteRun | ErrorInfo:
        """The store's choice among the plan's deployments (the first it finds neither
        cooling down nor at its limits), held for this request until it ends."""
        route = plan.route
        tokens = _estimate(request) if route.needs_tokens else 0
        chosen = self._admit(request_id, plan.order, tokens, plan.offered)
        if isinstance(chosen, ErrorInfo):
            return chosen
        deployment, remaining = chosen
        timeouts = request.timeouts
        total = timeouts.request_s if timeouts is not None and timeouts.request_s else deployment.request_s
        if deployment.busy_counted:
            self.busy[deployment.id] = self.busy.get(deployment.id, 0) + 1
        return RouteRun(route, deployment, remaining, total, tokens)

    def take(self, plan: Plan, deployment: str | None, request: Request, tokens: int) -> RouteRun:
        """The run of a request the gate's ticket admitted on `deployment` (one of the
        plan's), held for it until it ends (the gate settles it)."""
        order = plan.order
        chosen, rest = order[0], plan.rest
        if chosen.id != deployment:
            for i, d in enumerate(order):
                if d.id == deployment:
                    chosen, rest = d, order[i + 1 :]
                    break
        timeouts = request.timeouts
        total = timeouts.request_s if timeouts is not None and timeouts.request_s else chosen.request_s
        if chosen.busy_counted:
            self.busy[chosen.id] = self.busy.get(chosen.id, 0) + 1
        return RouteRun(plan.route, chosen, rest, total, tokens)

    def skipped(self, skipped: tuple[tuple[str, str], ...]) -> None:
        """Candidates a ticket skipped: one cooling down (another daemon may have cooled
        it) is offered last until the next read of the store's cooldowns says until when."""
        for name, why in skipped:
            if why == "cooldown":
                self.cooling[name] = max(self.cooling.get(name, 0.0), time.time() + COOLING_READ_S)

    def release(self, run: RouteRun, request_id: str) -> None:
        """An admitted request that never ran (refused after admission; with a gate, the
        gate gives back what its ticket held)."""
        if self.gate is None:
            self.store.release_now(request_id)
        self._not_busy(run.deployment)

    async def read_cooling(self) -> None:
        """With a shared store, until cancelled: the cooldowns of every route's deployment,
        those other daemons set included, every `COOLING_READ_S` (one read, whatever the
        traffic), so that selection offers them last."""
        store = self.later
        if store is None:
            return
        while True:
            scopes = [f"deployment:{d.id}" for route in self.routes.values() for d in route.deployments]
            now = time.time()
            try:
                found = await store.use(scopes, now)
            except Exception as exc:  # noqa: BLE001 - a view of cooldowns is never worth a crash
                log.debug("reading the deployments' cooldowns failed: %s", exc)
                found = []
            cooling = self.cooling
            for use in found:
                until = use.cooldown_until
                if until is not None:
                    name = use.scope.partition(":")[2]
                    if until > cooling.get(name, 0.0):
                        cooling[name] = until
            for name in [n for n, until in cooling.items() if until <= now]:
                del cooling[name]  # past: a submit no longer looks at the clock for it
            await trio.sleep(COOLING_READ_S)

    # -- the relay ------------------------------------------------------------------------

    def fallback(self, state: RequestState, msg: Relay) -> bool:
        """A routed request's terminal frame, when nothing of it was published before:
        True if it failed in a class the route falls back on and the next deployment
        took it, or its admission runs in a task that either sends the job on or hands
        the frame back to the relay (`deliver`): either way it must not be published now.
        Else False."""
        run: RouteRun = state.route
        route = run.route
        if not route.fallback or not run.remaining:
            return False
        # Only the fields a fallback decides on: most terminal frames are a finish whose
        # content is most of the frame, and the request's end reads the same fields.
        summary = summary_in(msg.frames[0])
        error = summary.error
        if summary.type != "error" or error is None or error.error_class not in route.fallback_on:
            state.summary = summary  # the request's last frame: its end reads it from here
            return False
        if summary.partial is not None and _has_content(msg.frames[0]):
            return False  # a whole response's content arrived, and was billed: not switched
        left = state.submitted_at + run.total_s - trio.current_time()
        job = state.sent_job()
        if left <= 0 or job is None:
            return False
        failed = run.deployment
        now = time.time()
        self._failed(route, failed, error, now)
        self._not_busy(failed)
        candidates = [d for d in run.remaining if self._can_serve(d)]
        gate = self.gate
        if gate is None:
            self.store.settle_now(
                Settlement(state.request_id, "", failed.id, run.tokens, 0, None, now)  # nothing was billed
            )
            chosen = self._admit(state.request_id, candidates, run.tokens)
            if isinstance(chosen, ErrorInfo):
                # Nothing may take it: its own error goes out, as it is.
                return False
            self._move(state, run, job, failed, error, chosen[0], chosen[1], left)
            return True
        held: Held | None = state.admission
        if held is None or not candidates:
            return False
        # The failed attempt's hold is given back and the request admitted anew over the
        # deployments left, with its key (so the key counts one request, however many
        # deployments it takes), under an id of its own: a shared store settles an id once.
        ticket = Ticket(
            f"{state.request_id}#{len(run.fallbacks) + 1}",
            held.key,
            gate.keys.get(held.key, _NO_KEY_LIMITS) if held.key else _NO_KEY_LIMITS,
            tuple([d.candidate for d in candidates]),
            held.tokens,
            now,
            claim=False,
        )
        if self.later is None:
            self.store.release_now(held.ticket)
            if self._took(state, run, held, ticket, self.store.admit_now(ticket), candidates, failed, error, job):
                return True
            recount = _recount(held, ticket)
            if recount is not None:
                _recounted(state, held, recount, self.store.admit_now(recount))
            return False
        if gate.nursery is None or self.deliver is None:
            return False
        run.moving = True
        generation, state.generation = state.generation, None  # between deployments: a cancel ends it here
        gate.nursery.start_soon(
            self._fall_back_later, state, msg, generation, held, ticket, candidates, failed, error, job
        )
        return True

    async def _fall_back_later(
        self,
        state: RequestState,
        msg: Relay,
        generation: int | None,
        held: Held,
        ticket: Ticket,
        candidates: Sequence[Deployment],
        failed: Deployment,
        error: ErrorInfo,
        job: Job,
    ) -> None:
        """A fallback's admission on a store that must be awaited; whatever happens, the
        request goes on elsewhere or gets its withheld terminal frame."""
        store = self.later
        assert store is not None
        assert self.deliver is not None
        run: RouteRun = state.route
        decision: Decision | None = None
        try:
            await store.release(held.ticket, held.key, held.deployment, held.tokens)
            decision = await store.admit(ticket)
        except Exception as exc:  # noqa: BLE001 - the request must still get its end
            log.warning("route %s: a fallback's admission failed: %s", run.route.name, str(exc)[:200])
        run.moving = False
        if state.ended:  # cancelled (or the daemon stopped) meanwhile: nothing goes on
            if isinstance(decision, Admitted) and self.gate is not None and self.gate.nursery is not None:
                taken = candidates[decision.deployment or 0].id
                self.gate.nursery.start_soon(store.release, ticket.request_id, ticket.key, taken, ticket.tokens)
            return
        try:
            if decision is not None and self._took(state, run, held, ticket, decision, candidates, failed, error, job):
                return
            recount = _recount(held, ticket) if state.admission is held else None
            if recount is not None:
                counted = await store.admit(recount)
                if self.requests.active.get(state.request_id) is not state:  # it ended meanwhile
                    if isinstance(counted, Admitted):
                        await store.release(recount.request_id, recount.key, None, recount.tokens)
                    return
                _recounted(state, held, recount, counted)
        except Exception as exc:  # noqa: BLE001 - as above: its error goes out instead
            log.warning("route %s: a fallback could not be sent on: %s", run.route.name, str(exc)[:200])
        state.generation = generation
        run.remaining = []  # so the relay publishes it now, as it would have
        self.deliver(msg)

    def _took(
        self,
        state: RequestState,
        run: RouteRun,
        held: Held,
        ticket: Ticket,
        decision: Decision,
        candidates: Sequence[Deployment],
        failed: Deployment,
        error: ErrorInfo,
        job: Job,
    ) -> bool:
        """A fallback's decision on the gate's store: True when it went on to the deployment
        admitted (the request then holds that ticket), False when none may take it (the
        released hold stays on the request, whose settlement then counts nothing twice)."""
        if not isinstance(decision, Admitted):
            return False
        if decision.skipped:
            self.skipped(decision.skipped)
        index = decision.deployment or 0
        after = candidates[index]
        state.admission = Held(held.key, after.id, held.tokens, ticket.request_id)
        left = state.submitted_at + run.total_s - trio.current_time()
        if left <= 0:  # its time ran out while it was admitted: it ends here, on that ticket
            return False
        self._move(state, run, job, failed, error, after, candidates[index + 1 :], left)
        return True

    def _move(
        self,
        state: RequestState,
        run: RouteRun,
        job: Job,
        failed: Deployment,
        error: ErrorInfo,
        after: Deployment,
        remaining: Sequence[Deployment],
        left: float,
    ) -> None:
        """The same job to the next deployment's worker, with the time left."""
        route = run.route
        run.remaining = remaining
        run.fallbacks.append(
            FallbackInfo(
                deployment=failed.id, error_class=error.error_class, message=error.message[:FALLBACK_MESSAGE_CHARS]
            )
        )
        run.deployment = after
        if after.busy_counted:
            self.busy[after.id] = self.busy.get(after.id, 0) + 1
        request = job.request
        old = request.timeouts or Timeouts()
        request = msgspec.structs.replace(
            request,
            timeouts=Timeouts(connect_s=old.connect_s, request_s=round(left, 3), stream_idle_s=old.stream_idle_s),
        )
        slot = self.slots[after.provider]
        key = after.key_index
        if key is None:  # the new provider's keys in turn; all resting: its first, whose answer says so
            picked = slot.keyring.next_key() if slot.keyring is not None else 0
            key = picked if isinstance(picked, int) else 0
        moved = msgspec.structs.replace(
            job,
            request=request,
            model=after.info,
            generation=0,
            deployment=after.id,
            fallbacks=list(run.fallbacks),
            key_index=key,
        )
        self.bus(
            "route.fallback",
            request_id=state.request_id,
            route=route.name,
            deployment=failed.id,
            next_deployment=after.id,
            provider=failed.provider,
            model=route.name,
            error_class=error.error_class,
            detail=error.message[:FALLBACK_MESSAGE_CHARS],
        )
        if self.metrics is not None:
            self.metrics.route_fallback(route.name, failed.id, after.id, error.error_class)
        self.requests.move(state, after.provider)
        state.generation = None
        state.job, state.job_bytes = moved, None
        state.resolved = after.info
        state.model = after.info.id
        state.progress = None  # the failed deployment's gathered content is not this one's
        slot.send(moved)

    def ended(self, state: RequestState) -> None:
        """A routed request ended: the store settled with what it cost, the breaker told
        of a failure, the deployment's share updated from its rate-limit headers."""
        run: RouteRun = state.route
        deployment = run.deployment
        if not run.moving and deployment.busy_counted:
            busy = self.busy
            count = busy.get(deployment.id, 0) - 1
            if count > 0:
                busy[deployment.id] = count
            else:
                busy.pop(deployment.id, None)
        terminal = summary_of(state)
        if terminal.type == "finish":
            response = terminal.response
            if response is not None and response.rate_limit is not None:
                self._note_share(deployment, response.rate_limit, time.time())
        elif terminal.type == "error" and terminal.error is not None:
            self._failed(run.route, deployment, terminal.error, time.time())
        if self.gate is None:  # else the gate settles the ticket that admitted it, key and deployment
            tokens, cost = terminal.billed()
            self.store.settle_held(state.request_id, tokens, cost, time.time())
        if state.span is not None:
            state.span.attributes["trunkline.route"] = run.route.name
        if self.metrics is not None:
            self.metrics.route_ended(run.route.name, deployment.id, _outcome(terminal))

    # -- inside ---------------------------------------------------------------------------

    def _admit(
        self,
        request_id: str,
        candidates: Sequence[Deployment],
        tokens: int,
        offered: tuple[Candidate, ...] | None = None,
    ) -> tuple[Deployment, Sequence[Deployment]] | ErrorInfo:
        """`offered`: the candidates' own, when made already (a plan's)."""
        if not candidates:
            return _error("unavailable", "no deployment is left to try")
        if offered is None:
            offered = tuple([d.candidate for d in candidates])
        decision = self.store.admit_now(Ticket(request_id, "", _NO_KEY_LIMITS, offered, tokens, time.time(), False))
        if isinstance(decision, Admitted):
            index = decision.deployment or 0
            return candidates[index], candidates[index + 1 :]
        if isinstance(decision, Refused):
            return _error(decision.error_class, decision.message, retry_after_s=decision.retry_after_s)
        return _error("invalid_request", f"request id {request_id!r} is already being served")

    def _failed(self, route: Route, deployment: Deployment, error: ErrorInfo, now: float) -> None:
        """The breaker counts a retryable failure; a rate limit that said when to come
        back cools the deployment until then."""
        if not RETRYABLE.get(error.error_class, False):
            return
        breaker = route.breaker
        later = self.later
        nursery = self.gate.nursery if self.gate is not None else None
        if later is not None:
            if nursery is not None:
                nursery.start_soon(self._fail_later, later, route, deployment, now)
        elif self.store.failure_now(
            deployment.id, now, threshold=breaker.failures, window_s=breaker.window_s, cooldown_s=breaker.cooldown_s
        ):
            self._cooled(route, deployment, now + breaker.cooldown_s, f"{breaker.failures} failures")
        if error.error_class == "rate_limit" and error.retry_after_s:
            until = now + error.retry_after_s
            if until > self.cooling.get(deployment.id, 0.0):
                if later is None:
                    self.store.cooldown_now(deployment.id, until)
                elif nursery is not None:
                    nursery.start_soon(later.cooldown, deployment.id, until)
                self._cooled(route, deployment, until, "rate limited (Retry-After)")

    async def _fail_later(self, store: AdmissionStore, route: Route, deployment: Deployment, now: float) -> None:
        """A failure counted on the shared store (every daemon's count together), off the relay."""
        breaker = route.breaker
        try:
            cooled = await store.failure(
                deployment.id, now, threshold=breaker.failures, window_s=breaker.window_s, cooldown_s=breaker.cooldown_s
            )
        except Exception as exc:  # noqa: BLE001 - a lost count is never worth a crash
            log.debug("counting a failure of deployment %s failed: %s", deployment.id, exc)
            return
        if cooled:
            self._cooled(route, deployment, now + breaker.cooldown_s, f"{breaker.failures} failures")

    def _cooled(self, route: Route, deployment: Deployment, until: float, why: str) -> None:
        self.cooling[deployment.id] = max(self.cooling.get(deployment.id, 0.0), until)
        wait = until - time.time()
        log.warning("route %s: deployment %s cooled down for %.1f s (%s)", route.name, deployment.id, wait, why)
        self.bus(
            "route.cooldown",
            route=route.name,
            deployment=deployment.id,
            provider=deployment.provider,
            wait_s=round(wait, 3),
            detail=why,
        )
        if self.metrics is not None:
            self.metrics.route_cooldown(route.name, deployment.id)

    def _note_share(self, deployment: Deployment, limit: RateLimit, now: float) -> None:
        """Lower a deployment's weight while its provider says little of its rate limit
        is left, before it answers 429 (docs/ARCHITECTURE.md, "Routes")."""
        left: list[tuple[float, float | None]] = []
        if limit.requests_limit and limit.requests_remaining is not None:
            left.append((limit.requests_remaining / limit.requests_limit, limit.requests_reset_s))
        if limit.tokens_limit and limit.tokens_remaining is not None:
            left.append((limit.tokens_remaining / limit.tokens_limit, limit.tokens_reset_s))
        if not left:
            return
        fraction, reset_s = min(left, key=lambda pair: pair[0])
        if fraction >= LOW_SHARE:
            self.share.pop(deployment.id, None)
            return
        self.share[deployment.id] = (max(fraction / LOW_SHARE, MIN_SHARE), now + (reset_s or SHARE_HOLD_S))

    def _can_serve(self, deployment: Deployment) -> bool:
        slot = self.slots.get(deployment.provider)
        return slot is not None and slot.state not in _CANNOT_SERVE

    def _state_of(self, deployment: Deployment) -> str:
        slot = self.slots.get(deployment.provider)
        if slot is None:
            return f"provider {deployment.provider} is not running on this daemon"
        if slot.state in ("not_configured", "unavailable"):
            return f"provider {deployment.provider} is {slot.state.replace('_', ' ')} ({slot.last_error})"
        return "cooling down" if deployment.id in self.cooling else "ready"

    def _not_busy(self, deployment: Deployment) -> None:
        if not deployment.busy_counted:
            return
        count = self.busy.get(deployment.id, 0) - 1
        if count > 0:
            self.busy[deployment.id] = count
        else:
            self.busy.pop(deployment.id, None)

    def model_info(self, name: str) -> ModelInfo | None:
        """A route named in `list_models`/`get_model_info`: its first deployment's entry,
        under the route's name, saying which deployments serve it."""
        route = self.routes.get(name)
        if route is None:
            return None
        first = route.deployments[0].info
        ids = ", ".join(f"{d.id} ({d.info.id})" for d in route.deployments)
        return msgspec.structs.replace(first, id=name, display_name=f"route {name}: {ids}", aliases=[])


def _recount(held: Held, refused: Ticket) -> Ticket | None:
    """After a fallback nothing took: the key's count of the request, given back with the
    failed attempt's hold, taken again (no limit may refuse it: the request did run)."""
    if not held.key:
        return None
    return Ticket(refused.request_id, held.key, _NO_KEY_LIMITS, (), held.tokens, time.time(), claim=False)


def _recounted(state: RequestState, held: Held, recount: Ticket, decision: Decision) -> None:
    if isinstance(decision, Admitted):
        state.admission = Held(held.key, None, held.tokens, recount.request_id)


def _outcome(terminal: Summary) -> str:
    """How a routed request ended, for the metrics: its finish reason, or "error"."""
    if terminal.type == "finish" and terminal.response is not None:
        return terminal.response.finish_reason.reason
    if terminal.type == "error" and terminal.error is not None:
        return "error"
    return "ended"


def _has_content(frame: bytes) -> bool:
    """An error event's partial response carries content (read in full: only for a
    failure that would fall back)."""
    event = decode_event(split_frame(frame)[1])
    return type(event) is ErrorEvent and event.partial is not None and bool(event.partial.message.content)


def _estimate(request: Request) -> int:
    """Tokens a request is counted for against a `tpm` limit before it runs: its prompt
    and the output it may ask for (corrected when it ends)."""
    return estimate_request_tokens(request) + (request.max_tokens or 0)


def _error(error_class: Any, message: str, **extra: Any) -> ErrorInfo:
    return ErrorInfo(error_class=error_class, message=message, retryable=RETRYABLE[error_class], **extra)
