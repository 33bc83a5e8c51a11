"""What every provider implements, and what the runtime hands it for one attempt.

A provider folder holds pure parts (request, response, stream, errors,
capabilities) and one `adapter.py` that wires them to I/O through this
interface: an HTTP provider through `HttpAdapter` (`_http.py`), the mock through
its playback; both feed the same `Pipeline` (`_contract.py`). The runtime owns
everything around an attempt: retries, deadlines, cancellation, the emitter and
the link to the supervisor.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import trio

from ..config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from ..protocol import provider_options
from ..protocol.accumulate import StreamAccumulator
from ..protocol.messages import Event, Job, Message, ModelInfo, RateLimit, Request, Response, WarningInfo
from ..protocol.provider_options import Options
from ..protocol.tokens import estimate_request_tokens
from ._keys import WorkerKeys
from .errors import ProviderError

if TYPE_CHECKING:
    from ._contract import BuildRequest, Built

T = TypeVar("T")

#: Default of `limits.max_response_bytes` (the worker's settings carry the configured one).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class Backlog(Protocol):
    """Where a job's events wait to leave the worker (the outbox): a stream reader stops
    reading from its provider while it is `full`."""

    @property
    def full(self) -> bool: ...

    async def wait_room(self) -> None: ...


@dataclass(slots=True)
class Deadlines:
    connect_s: float
    request_s: float
    stream_idle_s: float

    @classmethod
    def resolve(cls, policy: TimeoutPolicy, job: Job) -> Deadlines:
        t = job.request.timeouts
        return cls(
            connect_s=(t.connect_s if t and t.connect_s else policy.connect_s),
            request_s=(t.request_s if t and t.request_s else policy.request_s),
            stream_idle_s=(t.stream_idle_s if t and t.stream_idle_s else policy.stream_idle_s),
        )


@dataclass(slots=True)
class Call:
    """One attempt at one job."""

    job: Job
    provider: str
    attempt: int
    operation_id: str
    deadlines: Deadlines
    #: canonical tool-call id -> the id this provider must see, for every call in the history
    wire_ids: dict[str, str] = field(default_factory=dict)
    rate_limit: RateLimit | None = None
    warnings: list[WarningInfo] = field(default_factory=list)
    #: True while the upstream connection (or the mock's playback) is open; adapters keep it true.
    upstream_open: bool = False
    #: The provider accepted the request (a success status): from then on it may bill it.
    answered: bool = False
    #: Set for streamed jobs: the reader waits while it is full instead of buffering without bound.
    backlog: Backlog | None = None
    #: A whole-response job's content so far (and how many events made it), reported to the
    #: supervisor with the heartbeats so a worker crash does not lose it.
    gathered: StreamAccumulator | None = None
    gathered_events: int = 0
    reported_events: int = 0
    #: The request's provider options for this provider, decoded once (the runtime decodes
    #: them once per job; `Adapter.build` decodes them here when nobody has).
    options: Options | None = None
    #: Which of the provider's keys authenticates this attempt (`WorkerKeys`).
    key_index: int = 0
    #: Set by the runtime for a job's attempts: a response read to its end may keep its
    #: connection until the job's terminal event has gone out (`deferred`, `settle`).
    defer_close: bool = False
    #: What hands the connection of the response read last back to the pool, when that
    #: waits for the terminal event; the runtime runs it (`settle`) once that is out.
    deferred: Callable[[], Awaitable[None]] | None = None

    @property
    def attempt_id(self) -> str:
        return f"{self.operation_id}:attempt_{self.attempt}"

    async def settle(self) -> None:
        """Hand back the connection `deferred` holds, if any (once)."""
        deferred, self.deferred = self.deferred, None
        if deferred is not None:
            await deferred()

    @property
    def request(self) -> Request:
        return self.job.request

    @property
    def model(self) -> ModelInfo:
        return self.job.model


Emit = Callable[[Event], None]


class Adapter:
    """Base of every provider adapter. Subclasses set `provider_type` and
    `build_request` (their `request.build`)."""

    provider_type = ""
    build_request: ClassVar[BuildRequest]

    def __init__(self, name: str, config: ProviderConfig, retry: RetryPolicy, timeouts: TimeoutPolicy) -> None:
        self.name = name
        self.config = config
        self.retry = retry
        self.timeouts = timeouts
        #: Every key of the provider, by index; `api_key` is the one used outside jobs
        #: (a readiness check, a token count).
        self.keys = WorkerKeys(config)
        self.api_key = config.api_key()
        self.max_response_bytes = MAX_RESPONSE_BYTES
        #: How many jobs the worker runs now (set by the worker).
        self.jobs_running: Callable[[], int] = lambda: 1
        self._secrets = tuple(key for key in self.keys.values if key)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key's value: redacted from whatever leaves the worker."""
        return self._secrets

    def make_tool_id(self, canonical: str) -> str:
        """A provider id for a tool call that came from elsewhere. Canonical ids
        (`tu_` + 26 characters) are valid everywhere we know of."""
        return canonical

    def read_options(self, request: Request) -> Options:
        """The request's provider options for this instance (by its name, else its type),
        decoded; `invalid_request` if they do not fit (the supervisor has checked them)."""
        try:
            return provider_options.read(request.provider_options, self.name, self.provider_type)
        except provider_options.OptionsError as exc:
            raise ProviderError("invalid_request", str(exc)) from None

    def options_of(self, call: Call) -> Options:
        """The call's provider options, decoded once (the runtime does it once per job)."""
        if call.options is None:
            call.options = self.read_options(call.request)
        return call.options

    def build(self, call: Call, *, stream: bool) -> Built:
        """The call's native request (`build_request`); what translating it had to warn
        about joins the call's warnings."""
        built = self.build_request(
            call.request,
            call.model,
            provider=self.name,
            options=self.options_of(call),
            wire_ids=call.wire_ids,
            stream=stream,
            instance=self.config.options,
        )
        call.warnings.extend(w for w in built.warnings if w not in call.warnings)
        return built

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        """Run one streaming attempt: emit content events, return the finish skeleton
        (finish reason, usage, id, model, raw). Raise ProviderError on failure.
        `whole`: the client asked for a whole response, so a server that answers with
        one JSON body instead of a stream may be read as such (the result then has its
        message and nothing was emitted)."""
        raise NotImplementedError

    async def complete(self, call: Call) -> Response:
        """A whole-response attempt, streamed from the provider all the same: a long
        generation is then bounded by the idle timeout between chunks, not by one read
        timeout for the whole answer (which failed long answers as a `timeout` and
        sent them again, billed each time). The events are gathered here, never sent;
        the client gets the one terminal event it asked for."""
        acc = StreamAccumulator(self.name)
        fed = 0
        call.gathered = acc

        def take(event: Event) -> None:
            nonlocal fed
            fed += 1
            call.gathered_events = fed
            acc.feed(event)

        result = await self.stream(call, take, whole=True)  # a failure's gathered content: see the runtime
        if fed:  # streamed (else the server sent one JSON body, already parsed whole)
            result.message = Message(role="assistant", content=acc.content())
            result.model = result.model or acc.model
        return result

    async def ready(self, model: ModelInfo) -> None:
        """Raise ProviderError unless the next call to `model` is expected to work."""

    def count_tokens(self, request: Request, model: ModelInfo) -> int:
        return estimate_request_tokens(request)

    async def count_tokens_exact(self, request: Request, model: ModelInfo) -> int | None:
        """The provider's own count of the prompt's tokens, where it has an endpoint for
        that; None to fall back on `count_tokens`' estimate."""
        return None

    async def probe(self) -> str | None:
        """None when the provider's server answers; otherwise why not. Only local
        servers are probed: a hosted API is not worth a request every few seconds."""
        return None

    async def trim_idle(self, keep: int) -> int:
        """Close idle pooled connections beyond `keep`; how many were closed. Nothing
        to trim for a provider without a connection pool."""
        return 0

    async def aclose(self) -> None:
        pass


IDLE_SLACK = 0.01


def went_silent(who: str, idle_s: float) -> ProviderError:
    """The error of a source that sent nothing for the stream idle timeout."""
    return ProviderError("timeout", f"{who} sent nothing for {idle_s:g}s (stream idle timeout)")


async def consume(
    source: AsyncIterable[T], idle_s: float, what: str, handle: Callable[[T], None], backlog: Backlog | None = None
) -> None:
    """Hand every item of `source` to `handle`, failing with a `timeout` error when the
    source is silent for `idle_s`. One cancel scope for the whole stream (a scope per
    item costs more than the item on a fast stream), its deadline pushed on only when
    it has fallen `IDLE_SLACK` of `idle_s` behind: moving a deadline costs trio more
    than handling a chunk, and chunks come in bursts. So the timeout may fire up to
    1% early, never late.

    While `backlog` is full the source is not read (the provider's data waits in the
    kernel and the provider's server, not in our memory); that wait is ours, not the
    provider's silence, so the idle clock stops for it."""
    iterator = source.__aiter__()
    slack = idle_s * IDLE_SLACK
    pushed = -math.inf
    try:
        with trio.CancelScope() as scope:
            while True:
                now = trio.current_time()
                if now - pushed > slack:
                    scope.deadline = now + idle_s
                    pushed = now
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                handle(item)
                if backlog is not None and backlog.full:
                    scope.deadline = math.inf
                    await backlog.wait_room()
                    pushed = -math.inf
        if scope.cancelled_caught:
            raise went_silent(what, idle_s)
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
