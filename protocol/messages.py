"""Every message trunkline puts on a wire, in one file.

Three families share one tagged base (`type` is the tag):

* the canonical data model (content parts, messages, requests, responses),
* the client protocol: control requests and replies on the control socket,
  events on the event socket,
* the internal link between the supervisor and its workers.

Wire rules: msgpack maps; fields equal to their default are omitted, so a
missing field means its default; unknown fields are skipped, so an older peer
keeps working when a newer one adds a field. Docstrings here become the
descriptions in `schema.json`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

PROTOCOL_VERSION = 1

# How long a request's lists may be. Checked as a message is read, from the length
# msgpack states before the items (so a submit of five million stop sequences costs
# nothing): each item decoded is an object that costs many times its wire size.
#: Messages in one request.
MAX_MESSAGES = 100_000
#: Content parts in one message (and in one tool result).
MAX_PARTS = 100_000
#: Tools in one request.
MAX_TOOLS = 1_024
#: Stop sequences in one request (a provider takes 4 or 5; more are refused by it).
MAX_STOP_SEQUENCES = 256
#: Entries of `metadata`, and providers in `provider_options`.
MAX_ENTRIES = 256
#: Entries of a submit's `trace_context` (traceparent, tracestate, baggage, and room).
MAX_TRACE_CONTEXT = 8

Role = Literal["system", "developer", "user", "assistant", "tool"]
FinishReasonName = Literal["stop", "length", "tool_calls", "content_filter", "cancelled", "error", "other"]
#: The effort ladder, least to most; each model takes a subset (its catalog `rules.efforts`).
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
SamplingParam = Literal["temperature", "top_p", "top_k"]
ErrorClass = Literal[
    "authentication",
    "access_denied",
    "not_found",
    "invalid_request",
    "context_length",
    "content_filter",
    "quota_exceeded",
    "rate_limit",
    "server_error",
    "timeout",
    "network",
    "model_not_loaded",
    "invalid_response",
    "cancelled",
    "not_configured",
    "unavailable",
    "other",
]

#: `ErrorInfo.provider_code` of a request refused because its `client_id` was not
#: given to the connection it came on (a restarted daemon, a dropped connection):
#: say `hello` again and use the new client id.
UNKNOWN_CLIENT = "unknown_client"

#: Whether a retry of the same request can succeed, per error class.
RETRYABLE: dict[str, bool] = {
    "authentication": False,
    "access_denied": False,
    "not_found": False,
    "invalid_request": False,
    "context_length": False,
    "content_filter": False,
    "quota_exceeded": False,
    "rate_limit": True,
    "server_error": True,
    "timeout": True,
    "network": True,
    "model_not_loaded": True,
    "invalid_response": False,
    "cancelled": False,
    "not_configured": False,
    "unavailable": True,
    "other": False,
}


class Msg(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """Base of every tagged wire message."""


class Data(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of untagged records nested inside messages."""


# --------------------------------------------------------------------------
# Canonical data model: content parts


class CacheControl(Data, kw_only=True):
    """A prompt-cache breakpoint the caller placed on a part or a tool: the provider may
    cache the prompt up to and including it (Anthropic's `cache_control`). `ttl` is the
    cache's lifetime (Anthropic: `5m`, `1h`); null: the provider's default. Providers
    that cache on their own ignore it."""

    ttl: str | None = None


class TextPart(Msg, tag="text", kw_only=True):
    """Plain text."""

    text: str
    cache_control: CacheControl | None = None


class ImagePart(Msg, tag="image", kw_only=True):
    """An image given as a URL (https, http or data:) or as base64 `data`. The daemon
    refuses `path`: a client reads its own files (the Python client turns `path` into `data`)."""

    url: str | None = None
    data: str | None = None
    path: str | None = None
    media_type: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    cache_control: CacheControl | None = None


class AudioPart(Msg, tag="audio", kw_only=True):
    """Audio given as a URL or base64 `data` (`path`: read by the client, refused by the daemon)."""

    url: str | None = None
    data: str | None = None
    path: str | None = None
    media_type: str | None = None


class DocumentPart(Msg, tag="document", kw_only=True):
    """A document (PDF, plain text) given as a URL or base64 `data` (`path`: read by the
    client, refused by the daemon)."""

    url: str | None = None
    data: str | None = None
    path: str | None = None
    media_type: str | None = None
    name: str | None = None
    cache_control: CacheControl | None = None


class ToolCallPart(Msg, tag="tool_call", kw_only=True):
    """A tool invocation made by the model.

    `id` is the canonical id (`tu_` + ULID) clients use; `provider_id` is the
    provider's own id, kept verbatim, and `provider` names who issued it.
    `arguments` is null when the provider's arguments are not a JSON object (the
    response then carries a `tool_arguments_invalid` warning); `raw_arguments`
    keeps the provider's text."""

    id: str
    name: str
    arguments: dict[str, Any] | None = msgspec.field(default_factory=dict)
    raw_arguments: str | None = None
    provider_id: str | None = None
    provider: str | None = None
    cache_control: CacheControl | None = None


class ToolResultPart(Msg, tag="tool_result", kw_only=True):
    """The result of running a tool, answering the call whose id is `tool_call_id`."""

    tool_call_id: str
    content: str | Annotated[list[TextPart | ImagePart], msgspec.Meta(max_length=MAX_PARTS)] = ""
    is_error: bool = False
    name: str | None = None
    cache_control: CacheControl | None = None


class ThinkingPart(Msg, tag="thinking", kw_only=True):
    """Model reasoning. `signature` is opaque and only valid with the `provider` that made it
    (and, where the provider ties reasoning to a model, with `model`, the model that wrote it)."""

    text: str
    signature: str | None = None
    provider: str | None = None
    model: str | None = None


class RedactedThinkingPart(Msg, tag="redacted_thinking", kw_only=True):
    """Reasoning the provider encrypted; `data` is opaque and passed back byte for byte."""

    data: str
    provider: str | None = None
    model: str | None = None


class ProviderPart(Msg, tag="provider_part", kw_only=True):
    """Provider content with no canonical type (server-side tool blocks, compaction,
    encrypted reasoning items...), kept opaque and in order with the other parts.

    `api` is the wire API that produced it (`anthropic`, `openai`, `gemini`...),
    `kind` the provider's own type for it and `data` its raw JSON, verbatim. When
    the conversation continues on the same API (and on `model`, when set: the
    provider ties the part to the model that wrote it) the part goes back as it
    came; anywhere else it is dropped with a warning."""

    api: str
    kind: str
    data: Any = None
    model: str | None = None
    provider: str | None = None


ContentPart = (
    TextPart
    | ImagePart
    | AudioPart
    | DocumentPart
    | ToolCallPart
    | ToolResultPart
    | ThinkingPart
    | RedactedThinkingPart
    | ProviderPart
)


class Message(Data, kw_only=True):
    """One conversation entry. Tool results travel in `role: tool` messages."""

    role: Role
    content: Annotated[list[ContentPart], msgspec.Meta(max_length=MAX_PARTS)] = msgspec.field(default_factory=list)
    name: str | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        """The concatenation of every text part."""
        return "".join(p.text for p in self.content if type(p) is TextPart)

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.content if type(p) is ToolCallPart]

    @staticmethod
    def _parts(parts: tuple[str | ContentPart, ...]) -> list[ContentPart]:
        return [TextPart(text=p) if isinstance(p, str) else p for p in parts]

    @classmethod
    def system(cls, *parts: str | ContentPart) -> Message:
        return cls(role="system", content=cls._parts(parts))

    @classmethod
    def developer(cls, *parts: str | ContentPart) -> Message:
        return cls(role="developer", content=cls._parts(parts))

    @classmethod
    def user(cls, *parts: str | ContentPart) -> Message:
        """A user message; strings become text parts, other parts (images...) pass as given."""
        return cls(role="user", content=cls._parts(parts))

    @classmethod
    def assistant(cls, *parts: str | ContentPart) -> Message:
        return cls(role="assistant", content=cls._parts(parts))

    @classmethod
    def tool_result(
        cls,
        tool_call_id: str,
        content: str | list[TextPart | ImagePart],
        *,
        is_error: bool = False,
        name: str | None = None,
    ) -> Message:
        """The result of running the tool call `tool_call_id`."""
        return cls(
            role="tool",
            content=[ToolResultPart(tool_call_id=tool_call_id, content=content, is_error=is_error, name=name)],
        )


# --------------------------------------------------------------------------
# Canonical data model: requests


class Tool(Data, kw_only=True):
    """A function the model may call; `parameters` is a JSON Schema object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    cache_control: CacheControl | None = None


class ToolChoice(Data, kw_only=True):
    """`auto` (default), `none`, `required` (some tool), or `tool` with `name`."""

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    name: str | None = None


class ResponseFormat(Data, kw_only=True):
    """Structured output: `json_object`, or `json_schema` with `schema` (and a `name`)."""

    kind: Literal["text", "json_object", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None


class Timeouts(Data, kw_only=True):
    """Per-request deadlines in seconds; unset fields take the daemon's defaults."""

    connect_s: float | None = None
    request_s: float | None = None
    stream_idle_s: float | None = None


class Request(Data, kw_only=True):
    """A model call in canonical form.

    `model` is a canonical `provider:name` id, an alias, or a provider-native
    name together with `provider`. `provider_options` maps a provider name to
    options only that provider reads."""

    model: str
    messages: Annotated[list[Message], msgspec.Meta(max_length=MAX_MESSAGES)]
    provider: str | None = None
    tools: Annotated[list[Tool], msgspec.Meta(max_length=MAX_TOOLS)] = msgspec.field(default_factory=list)
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop_sequences: Annotated[list[str], msgspec.Meta(max_length=MAX_STOP_SEQUENCES)] = msgspec.field(
        default_factory=list
    )
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    metadata: Annotated[dict[str, str], msgspec.Meta(max_length=MAX_ENTRIES)] = msgspec.field(default_factory=dict)
    provider_options: Annotated[dict[str, dict[str, Any]], msgspec.Meta(max_length=MAX_ENTRIES)] = msgspec.field(
        default_factory=dict
    )
    session_id: str | None = None
    max_retries: int | None = None
    timeouts: Timeouts | None = None
    include_raw: bool = False
    passthrough: bool = False


# --------------------------------------------------------------------------
# Canonical data model: responses


class Usage(Data, kw_only=True):
    """Token counts. `input_tokens` counts every prompt token, cached ones included
    (`cache_read_tokens` and `cache_write_tokens` are parts of it); `output_tokens`
    counts everything generated, reasoning included (`reasoning_tokens` is part of it).
    `estimated` is true when any figure is a local estimate, not the provider's;
    `estimated_fields` names those figures (`reasoning_tokens` alone when only the
    reasoning count was estimated, say), so the others can be trusted."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: The part of `cache_write_tokens` written with the longer lifetime (Anthropic's
    #: 1-hour writes, OpenAI's 12-hour ones), billed at `Price.cache_write_long`.
    cache_write_long_tokens: int = 0
    estimated: bool = False
    estimated_fields: list[str] = msgspec.field(default_factory=list)

    def mark_estimated(self, *fields: str) -> Usage:
        """Record `fields` as local estimates (and set `estimated`); returns self."""
        for name in fields:
            if name not in self.estimated_fields:
                self.estimated_fields.append(name)
        self.estimated = self.estimated or bool(fields)
        return self

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_long_tokens=self.cache_write_long_tokens + other.cache_write_long_tokens,
            estimated=self.estimated or other.estimated,
            estimated_fields=self.estimated_fields
            + [f for f in other.estimated_fields if f not in self.estimated_fields],
        )


class FinishReason(Data, kw_only=True):
    """Why generation ended, and the provider's own word for it in `raw`."""

    reason: FinishReasonName = "other"
    raw: str | None = None
    stop_sequence: str | None = None


class RateLimit(Data, kw_only=True):
    """Rate-limit state the provider reported in its response headers."""

    requests_limit: int | None = None
    requests_remaining: int | None = None
    requests_reset_s: float | None = None
    tokens_limit: int | None = None
    tokens_remaining: int | None = None
    tokens_reset_s: float | None = None
    retry_after_s: float | None = None


class WarningInfo(Data, kw_only=True):
    """Something the request asked for that this provider could not honour exactly."""

    code: str
    message: str


class FallbackInfo(Data, kw_only=True):
    """A deployment of a route that was tried before the one that served (or failed
    last), and why it was left: its error's class and message."""

    deployment: str
    error_class: ErrorClass
    message: str = ""


class Response(Data, kw_only=True):
    """The complete result of a call: the same whether it was streamed or not."""

    id: str = ""
    model: str = ""
    provider: str = ""
    message: Message = msgspec.field(default_factory=lambda: Message(role="assistant"))
    finish_reason: FinishReason = msgspec.field(default_factory=FinishReason)
    usage: Usage = msgspec.field(default_factory=Usage)
    cost_usd: float | None = None
    pricing_version: str | None = None
    latency_ms: float = 0.0
    warnings: list[WarningInfo] = msgspec.field(default_factory=list)
    rate_limit: RateLimit | None = None
    raw: Any = None
    # -- routes (issue 31): which of a route's deployments served, and those tried before.
    #: The deployment id that served (or failed last); null for a model named directly.
    deployment: str | None = None
    fallbacks: list[FallbackInfo] = msgspec.field(default_factory=list)

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return self.message.tool_calls

    @property
    def reasoning(self) -> str | None:
        """The reasoning (thinking) text, its parts joined; None when the model gave no
        reasoning part (a redacted part counts, with no text, so it gives "")."""
        parts = [p for p in self.message.content if isinstance(p, (ThinkingPart, RedactedThinkingPart))]
        if not parts:
            return None
        return "".join(p.text for p in parts if isinstance(p, ThinkingPart))


class ErrorInfo(Data, kw_only=True):
    """A failure, classified. The provider's message is kept; credentials never are."""

    error_class: ErrorClass
    message: str
    retryable: bool = False
    retry_after_s: float | None = None
    provider: str | None = None
    provider_status: int | None = None
    provider_code: str | None = None
    #: `quota_exceeded` over a client key's budget: when the budget resets (wall-clock
    #: seconds, the next UTC midnight or month start).
    resets_at: float | None = None


# --------------------------------------------------------------------------
# Catalog and status records


class PriceTier(Data, kw_only=True):
    """The rates of a whole request whose prompt is longer than `above_input_tokens`
    (USD per million tokens; a null rate: the same as the base price's)."""

    above_input_tokens: int
    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_long: float | None = None


class ScheduledPrice(Data, kw_only=True):
    """A price that applies from `effective` (an ISO date, UTC) on, replacing the
    base rates it sets (null: unchanged)."""

    effective: str
    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_long: float | None = None
    long_context: PriceTier | None = None


class Price(Data, kw_only=True):
    """USD per million tokens; null when unknown. `cache_write` is the default cache
    lifetime's write price (Anthropic 5 minutes, OpenAI 30 minutes), `cache_write_long`
    the longer one's (Anthropic 1 hour, OpenAI 12 hours). `long_context` prices the
    whole request when its prompt is long; `service_tiers` multiplies every rate when
    the request asks for that tier (`provider_options.<provider>.service_tier`);
    `scheduled` holds announced price changes, each from its day on."""

    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_long: float | None = None
    long_context: PriceTier | None = None
    service_tiers: dict[str, float] = msgspec.field(default_factory=dict)
    scheduled: list[ScheduledPrice] = msgspec.field(default_factory=list)


class ModelRules(Data, kw_only=True):
    """What a model accepts, from its provider's documentation (`sources` maps each
    rule's name to the page it comes from). An unset rule is not known: the request
    passes as given and the provider decides."""

    #: Sampling parameters the model takes (`[]`: none); null: no rule known.
    sampling: list[SamplingParam] | None = None
    #: At most one sampling parameter per request ("not together").
    sampling_exclusive: bool = False
    #: Sampling parameters only while reasoning is off (effort `none`).
    sampling_needs_no_reasoning: bool = False
    #: Effort values the model takes; null: any.
    efforts: list[ReasoningEffort] | None = None
    #: The effort the provider applies when the request names none.
    default_effort: ReasoningEffort | None = None
    #: Reasoning cannot be turned off.
    thinking_always_on: bool = False
    #: The model reasons when the request does not mention reasoning (turning it off
    #: takes an explicit `none`).
    thinking_default_on: bool = False
    #: Forced tool choice (`required`, a named tool) is allowed while thinking is on.
    forced_tool_with_thinking: bool = True
    #: Reasoning parts (signatures) are valid only for the model that wrote them.
    thinking_tied_to_model: bool = False
    #: Function tools over Chat Completions: `yes`, `no_reasoning` (only with effort `none`), `no`.
    chat_completions_tools: Literal["yes", "no_reasoning", "no"] = "yes"
    #: Largest prompt, where smaller than the context window.
    max_input_tokens: int | None = None
    #: Largest output of a non-streamed call, where smaller than `max_output`.
    max_output_non_streaming: int | None = None
    #: Largest output of one answer when the provider can continue a generation past
    #: `max_output` (Gemini's long decode); the worker follows the continuations.
    max_output_total: int | None = None
    #: `max_tokens` sent when the request gives none (not the maximum: providers
    #: count it against output rate limits).
    default_max_tokens: int | None = None
    #: A conversation may end with an assistant message the answer continues (a
    #: prefill); false where the provider refuses it for this model.
    prefill: bool | None = None
    sources: dict[str, str] = msgspec.field(default_factory=dict)


class Capabilities(Data, kw_only=True):
    """What a request to a model through this daemon may use: the model's catalog
    flags met with what the daemon's implementation of its provider type carries.
    `vision` is images, `documents` PDFs and text files, `audio` audio input;
    `prefill` a conversation ending with an assistant message the answer continues."""

    tools: bool = False
    parallel_tool_calls: bool = False
    vision: bool = False
    documents: bool = False
    audio: bool = False
    reasoning: bool = False
    structured_output: bool = False
    streaming: bool = True
    prompt_caching: bool = False
    prefill: bool = False


class ModelInfo(Data, kw_only=True):
    """One catalog entry. `configured` says whether its provider can serve it now;
    `thinking` says how reasoning is steered (`budget` of tokens, or `adaptive` with
    an effort level); `rules` what the model accepts; `capabilities` what a request
    to it may use through this daemon (a request using anything else is refused
    before any call)."""

    id: str
    provider: str
    wire_name: str
    display_name: str = ""
    aliases: list[str] = msgspec.field(default_factory=list)
    context_window: int | None = None
    max_output: int | None = None
    tools: bool = True
    vision: bool = False
    reasoning: bool = False
    thinking: Literal["budget", "adaptive"] | None = None
    streaming: bool = True
    structured_output: bool = False
    price: Price = msgspec.field(default_factory=Price)
    pricing_version: str | None = None
    rules: ModelRules = msgspec.field(default_factory=ModelRules)
    configured: bool = False
    in_catalog: bool = True
    #: What a request to it may use through this daemon (set by the daemon, never in a
    #: catalog file); null from a daemon that does not say.
    capabilities: Capabilities | None = None


class WorkerStatus(Data, kw_only=True):
    """The state of one provider's worker process. `unreachable` says why a running
    worker cannot reach its server (a local server that is not running)."""

    provider: str
    provider_type: str
    state: Literal["starting", "running", "restarting", "unavailable", "not_configured", "stopped"]
    pid: int | None = None
    restarts: int = 0
    in_flight: int = 0
    last_error: str | None = None
    last_heartbeat_s: float | None = None
    unreachable: str | None = None
    #: Its keys when it has several (`providers.<name>.keys_env`), in index order.
    api_keys: list[ApiKeyStatus] = msgspec.field(default_factory=list)


class ApiKeyStatus(Data, kw_only=True):
    """One of a provider's keys, named by its environment variable (never by its value).
    `requests`: requests given this key since the daemon started; `cooling_s`: how long
    it still rests after a 429 or a 401/403 (`last_error` says which), else null; a key
    whose variable is not set is never used (`set` false)."""

    variable: str
    set: bool = True
    requests: int = 0
    cooling_s: float | None = None
    last_error: str | None = None


class Limits(Data, kw_only=True):
    """What the daemon accepts."""

    max_message_bytes: int
    replay_ring_events: int
    replay_keep_s: float
    #: The largest event the daemon sends (a bigger one is refused with an error event);
    #: a subscriber must accept messages this large. 0: not stated (older daemons).
    max_event_bytes: int = 0


# --------------------------------------------------------------------------
# Control requests (client -> supervisor, Req0 -> Rep0)


class Hello(Msg, tag="hello", kw_only=True):
    """Opens a session. `token` is required only on TCP endpoints. `watch_bus` false
    promises that this client id does not subscribe to `bus`: a daemon whose welcome says
    `bus_on_demand` then publishes a request's bus events only while some client wants
    them (left out, as older clients do: true)."""

    protocol: int = PROTOCOL_VERSION
    client_name: str = ""
    token: str | None = None
    watch_bus: bool = True


class Probe(Msg, tag="probe", kw_only=True):
    """Ask the supervisor to publish a `probe` event on topic `client_id`."""

    client_id: str


class Submit(Msg, tag="submit", kw_only=True):
    """Start a request. Idempotent by `request_id`: a repeat never makes a second call.
    `trace_context` carries the caller's W3C trace context (`traceparent`, and
    `tracestate`/`baggage` when set) so the daemon's span for the call joins the
    caller's trace; a value that does not parse starts a new trace."""

    request_id: str
    client_id: str
    request: Request
    stream: bool = True
    operation_id: str | None = None
    trace_context: Annotated[dict[str, str], msgspec.Meta(max_length=MAX_TRACE_CONTEXT)] = msgspec.field(
        default_factory=dict
    )
    #: The name of the named client key an HTTP request came with: set by the front
    #: door only (the daemon refuses it from any other connection).
    client_key: str | None = None


class Cancel(Msg, tag="cancel", kw_only=True):
    """Cancel a request; idempotent."""

    request_id: str


class Replay(Msg, tag="replay", kw_only=True):
    """Ask again for a request's events from `from_seq` on."""

    request_id: str
    from_seq: int = 0


class ListModels(Msg, tag="list_models", kw_only=True):
    """The catalog, or one provider's part of it; with `model`, only the entry that
    name resolves to as a submit's `model` (and `provider`) would (none when unknown)."""

    provider: str | None = None
    model: str | None = None


class StatusQuery(Msg, tag="status", kw_only=True):
    pass


class Ready(Msg, tag="ready", kw_only=True):
    """Pre-flight check: credentials valid, model known, model loaded (local servers)."""

    model: str
    provider: str | None = None


class CountTokens(Msg, tag="count_tokens", kw_only=True):
    request: Request


class Goodbye(Msg, tag="goodbye", kw_only=True):
    """The client is leaving: its unfinished requests are cancelled."""

    client_id: str


class WatchBus(Msg, tag="watch_bus", kw_only=True):
    """Change what this client's `hello.watch_bus` said: from the reply on, a daemon with
    `bus_on_demand` publishes requests' bus events while `watch` is true for any client."""

    client_id: str
    watch: bool = True


class Reload(Msg, tag="reload", kw_only=True):
    """Re-read the daemon's config file and the catalog (as SIGHUP does). Requests in
    flight finish as they started; new ones use what was read. A file that cannot be
    used is refused with its error and the running configuration stays."""


ControlRequest = (
    Hello
    | Probe
    | Submit
    | Cancel
    | Replay
    | ListModels
    | StatusQuery
    | Ready
    | CountTokens
    | Goodbye
    | Reload
    | WatchBus
)


# --------------------------------------------------------------------------
# Control replies (supervisor -> client)


class Welcome(Msg, tag="welcome", kw_only=True):
    """Reply to `hello`. Dial `event_endpoint`, subscribe to `client_id`, then probe."""

    client_id: str
    server_version: str
    event_endpoint: str
    limits: Limits
    protocol: int = PROTOCOL_VERSION
    providers: list[str] = msgspec.field(default_factory=list)
    #: True: the bus events of requests (those with a `request_id`) are published only
    #: while a client wants them (`hello.watch_bus`, `watch_bus`); the others always are.
    #: False (older daemons): every bus event is published.
    bus_on_demand: bool = False


class ProbeSent(Msg, tag="probe_sent", kw_only=True):
    pass


class Accepted(Msg, tag="accepted", kw_only=True):
    """The request is running; its events come on the event socket."""

    request_id: str
    provider: str
    model: str = ""
    duplicate: bool = False


class Rejected(Msg, tag="rejected", kw_only=True):
    """The request was refused before any provider call."""

    error: ErrorInfo
    request_id: str = ""


class CancelResult(Msg, tag="cancel_result", kw_only=True):
    """`cancelled` is false when the request had already ended or is unknown."""

    request_id: str
    cancelled: bool


class ReplayResult(Msg, tag="replay_result", kw_only=True):
    """Events (each a complete event message) from `from_seq` on, at most a batch at a
    time. `first_seq` is the oldest event still held, `last_seq` the newest published;
    `state` says whether more may come (`unknown`: no such request, or it expired)."""

    request_id: str
    events: list[msgspec.Raw] = msgspec.field(default_factory=list)
    first_seq: int = 0
    last_seq: int = -1
    state: Literal["running", "ended", "unknown"] = "unknown"


class Models(Msg, tag="models", kw_only=True):
    models: list[ModelInfo] = msgspec.field(default_factory=list)


class KeyUse(Data, kw_only=True):
    """The use of one client key (`scope` "key") or one deployment (`scope`
    "deployment") as admission counts it, with its limits (None: no limit)."""

    scope: Literal["key", "deployment"]
    name: str
    requests_last_minute: int = 0
    tokens_last_minute: int = 0
    in_flight: int = 0
    usd_today: float = 0.0
    usd_this_month: float = 0.0
    rpm: int | None = None
    tpm: int | None = None
    parallel: int | None = None
    usd_per_day: float | None = None
    usd_per_month: float | None = None
    #: A deployment cooling down: until when (wall-clock seconds).
    cooldown_until: float | None = None


class SharedStateStatus(Data, kw_only=True):
    """The store limits, budgets, cooldowns and request ids are shared through
    (`shared_state`): `kind` "redis"; `url` without its password; `degraded` while it
    does not answer and this daemon decides on its own share of each limit (`since`:
    wall-clock seconds, `reason`: why); `daemons`: how many daemons were last seen
    sharing it; `local_decisions`: admissions decided locally since the start;
    `pending_settlements`: request ends waiting to reach it."""

    kind: str
    url: str = ""
    degraded: bool = False
    since: float | None = None
    reason: str | None = None
    daemons: int = 1
    local_decisions: int = 0
    pending_settlements: int = 0


class StatusReport(Msg, tag="status_report", kw_only=True):
    server_version: str
    pid: int
    uptime_s: float
    in_flight: int = 0
    workers: list[WorkerStatus] = msgspec.field(default_factory=list)
    #: Each named client key's and each limited deployment's use (empty: none configured).
    keys: list[KeyUse] = msgspec.field(default_factory=list)
    #: None when no shared state is configured (the daemon's memory decides).
    shared_state: SharedStateStatus | None = None


class ReadyResult(Msg, tag="ready_result", kw_only=True):
    ok: bool
    model: str = ""
    error: ErrorInfo | None = None


class TokenCount(Msg, tag="token_count", kw_only=True):
    input_tokens: int
    exact: bool = False


class WatchBusAck(Msg, tag="watch_bus_ack", kw_only=True):
    """Reply to `watch_bus`."""

    watch: bool


class GoodbyeAck(Msg, tag="goodbye_ack", kw_only=True):
    """Reply to `goodbye`: how many unfinished requests were cancelled."""

    cancelled: int = 0


class ReloadResult(Msg, tag="reload_result", kw_only=True):
    """Reply to `reload`. `ok` false: `error` says what is wrong with which file, and
    nothing changed. `pricing_version` names the price table now in use;
    `restart_needed` lists the settings that changed but apply only from the next
    daemon start (providers' endpoints, keys and options, sockets, limits...)."""

    ok: bool
    error: ErrorInfo | None = None
    pricing_version: str | None = None
    config_path: str = ""
    restart_needed: list[str] = msgspec.field(default_factory=list)


class ProtocolError(Msg, tag="protocol_error", kw_only=True):
    """The request could not be read (malformed, unknown type, missing field, too large)."""

    error: ErrorInfo


ControlReply = (
    Welcome
    | ProbeSent
    | Accepted
    | Rejected
    | CancelResult
    | ReplayResult
    | Models
    | StatusReport
    | ReadyResult
    | TokenCount
    | GoodbyeAck
    | ReloadResult
    | WatchBusAck
    | ProtocolError
)


# --------------------------------------------------------------------------
# Events (supervisor -> clients on the Pub0, framed `topic \x00 msgpack`)


class Event(Msg, kw_only=True):
    """Base of stream events. `seq` counts a request's events from 0 with no gaps."""

    request_id: str = ""
    seq: int = 0


class StreamStart(Event, tag="stream_start", kw_only=True):
    """First event of a stream: the model that actually serves it."""

    model: str = ""
    provider: str = ""
    warnings: list[WarningInfo] = msgspec.field(default_factory=list)
    #: The route deployment serving the stream (null for a model named directly).
    deployment: str | None = None


class TextStart(Event, tag="text_start", kw_only=True):
    index: int = 0


class TextDelta(Event, tag="text_delta", kw_only=True):
    index: int = 0
    text: str = ""


class TextEnd(Event, tag="text_end", kw_only=True):
    """`text` is the part's full text."""

    index: int = 0
    text: str = ""


class ReasoningStart(Event, tag="reasoning_start", kw_only=True):
    index: int = 0


class ReasoningDelta(Event, tag="reasoning_delta", kw_only=True):
    index: int = 0
    text: str = ""


class ReasoningEnd(Event, tag="reasoning_end", kw_only=True):
    """The whole reasoning part: its text, its `signature`, or `redacted_data`."""

    index: int = 0
    text: str = ""
    signature: str | None = None
    redacted_data: str | None = None


class ToolCallStart(Event, tag="tool_call_start", kw_only=True):
    index: int = 0
    id: str = ""
    name: str = ""
    provider_id: str | None = None


class ToolCallDelta(Event, tag="tool_call_delta", kw_only=True):
    """`partial_json` is the provider's raw fragment, verbatim; not valid JSON on its own."""

    index: int = 0
    id: str = ""
    partial_json: str = ""


class ToolCallEnd(Event, tag="tool_call_end", kw_only=True):
    """`arguments` parsed from all fragments (`{}` if nothing parses on cancel; null
    when the fragments are not a JSON object); `raw_arguments` is the joined fragments."""

    index: int = 0
    id: str = ""
    name: str = ""
    arguments: dict[str, Any] | None = msgspec.field(default_factory=dict)
    raw_arguments: str = ""
    provider_id: str | None = None


class ProviderPartEvent(Event, tag="provider_part", kw_only=True):
    """A whole opaque provider part (see `ProviderPart`) at content index `index`: it
    has no deltas, so it comes as one event, in order with the other parts."""

    index: int = 0
    api: str = ""
    kind: str = ""
    data: Any = None
    model: str | None = None


class ProviderEvent(Event, tag="provider_event", kw_only=True):
    """A raw provider event, sent only when the request asked for `passthrough`."""

    provider: str = ""
    event_type: str = ""
    data: Any = None


class Finish(Event, tag="finish", kw_only=True):
    """Terminal: the whole response. Authoritative even if deltas were lost."""

    response: Response


class ErrorEvent(Event, tag="error", kw_only=True):
    """Terminal: the failure and the `partial` response accumulated so far."""

    error: ErrorInfo
    partial: Response | None = None


class ProbeEvent(Event, tag="probe", kw_only=True):
    """Published on a client's topic in answer to a `probe` request."""

    client_id: str = ""


class BusEvent(Event, tag="bus", kw_only=True):
    """Observability, on topic `bus`: `llm.call_started`, `llm.call_completed`,
    `llm.call_failed`, `llm.retrying`, `llm.rate_limited`, `worker.*`."""

    name: str = ""
    provider: str | None = None
    model: str | None = None
    operation_id: str | None = None
    attempt_id: str | None = None
    attempt: int | None = None
    error_class: str | None = None
    retry_count: int | None = None
    wait_s: float | None = None
    latency_ms: float | None = None
    usage: Usage | None = None
    detail: str | None = None
    # -- routes (issue 31): `route.fallback` (from `deployment` to `next_deployment`),
    # `route.cooldown` (a deployment cooled down).
    route: str | None = None
    deployment: str | None = None
    next_deployment: str | None = None


StreamEvent = (
    StreamStart
    | TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | ProviderPartEvent
    | ProviderEvent
    | Finish
    | ErrorEvent
)
AnyEvent = StreamEvent | ProbeEvent | BusEvent
TERMINAL_EVENTS = (Finish, ErrorEvent)


# --------------------------------------------------------------------------
# Internal link (supervisor <-> worker, one socket pair per worker process). Not for clients.


class Job(Msg, tag="job", kw_only=True):
    """A request handed to a worker, with its model already resolved."""

    request_id: str
    client_id: str
    request: Request
    model: ModelInfo
    operation_id: str
    stream: bool = True
    generation: int = 0
    #: The provider's retry and timeout policies (config `retry` / `timeouts`) when a
    #: reload changed them since the worker started; null: the worker's own.
    retry: dict[str, Any] | None = None
    timeouts: dict[str, Any] | None = None
    #: Which of the provider's keys authenticates it (an index into `keys_env`; 0: the one
    #: key of a provider that has one). The worker may move to another of its keys for a
    #: retry after a 429 or a 401/403 (see `KeyFailed`).
    key_index: int = 0
    # -- routes (issue 31): the worker copies these into what it emits (`StreamStart`,
    # the response, an error's partial), so the supervisor never re-encodes an event.
    deployment: str | None = None
    fallbacks: list[FallbackInfo] = msgspec.field(default_factory=list)


class StopJob(Msg, tag="stop_job", kw_only=True):
    request_id: str


class CheckReady(Msg, tag="check_ready", kw_only=True):
    call_id: int
    model: ModelInfo


class EstimateTokens(Msg, tag="estimate_tokens", kw_only=True):
    call_id: int
    request: Request
    model: ModelInfo


class Shutdown(Msg, tag="shutdown", kw_only=True):
    """Finish in-flight jobs within `grace_s`, cancel the rest, then exit."""

    grace_s: float = 10.0


class CallEvents(Msg, tag="call_events", kw_only=True):
    """Whether the worker sends each attempt's `llm.call_started` and
    `llm.call_completed` (the supervisor says no while no client watches the bus and
    no span needs them; a worker starts with yes)."""

    send: bool = True


ToWorker = Job | StopJob | CheckReady | EstimateTokens | Shutdown | CallEvents


class WorkerUp(Msg, tag="worker_up", kw_only=True):
    provider: str
    pid: int
    generation: int = 0


class Heartbeat(Msg, tag="heartbeat", kw_only=True):
    """Every second or so. `unreachable` is set when the provider's server cannot be
    reached (probed for local servers), with the reason."""

    in_flight: int = 0
    unreachable: str | None = None


class Relay(Msg, tag="relay", kw_only=True):
    """Events ready to publish. Each frame is `topic \\x00 event-msgpack`; `last_seq`
    is the seq of the last frame and `terminal` says it ended the request."""

    request_id: str
    frames: list[bytes]
    last_seq: int
    terminal: bool = False


class RelayBatch(Msg, tag="relay_batch", kw_only=True):
    """Several relays in one link message: under load a worker sends what queued up
    since its last send in one go, so the supervisor pays one receive for all of it."""

    relays: list[Relay]


class CallResult(Msg, tag="call_result", kw_only=True):
    """The answer to `check_ready` / `estimate_tokens`; `exact` when the provider counted
    the tokens itself rather than the worker estimating them."""

    call_id: int
    ok: bool = True
    error: ErrorInfo | None = None
    input_tokens: int = 0
    exact: bool = False


class Progress(Msg, tag="progress", kw_only=True):
    """What a whole-response job has gathered so far (sent with the heartbeats while it
    grows): if the worker dies, the supervisor's error still carries that partial."""

    request_id: str
    content: list[ContentPart] = msgspec.field(default_factory=list)
    model: str = ""


class KeyFailed(Msg, tag="key_failed", kw_only=True):
    """One of the provider's keys was answered 429 (`rate_limit`) or 401/403
    (`authentication`): the supervisor rests it (`retry_after_s`, the provider's
    Retry-After, or the provider's `key_cooldown_s`) and gives its next jobs another."""

    key_index: int
    error_class: ErrorClass
    retry_after_s: float | None = None


FromWorker = WorkerUp | Heartbeat | Relay | RelayBatch | CallResult | Progress | KeyFailed
