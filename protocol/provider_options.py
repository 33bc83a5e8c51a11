"""What `provider_options` may hold, per provider type: one schema, read by the
supervisor (which refuses a bad option before any provider call) and by the
workers (which take from it what goes into the provider's body).

Each provider's options are of three kinds:

* its own options, read by the worker (`thinking`, `beta_headers`, `background`...);
* fields of the provider's request body that trunkline does not set itself and
  passes through as given (`top_k`, `service_tier`, `safety_settings`...);
* `extra_body`: anything else, merged into the body verbatim. This is the one way
  to send a field this schema does not know (a new API parameter, a server's
  extension), so that a misspelt option is an error instead of a silent no-op.

An unknown key is refused, naming the nearest known one. OpenAI-compatible servers
are the exception: each server has its own extensions, so an unknown key there is
forwarded with an `unknown_option` warning (`extra_body` forwards without one).

A request names a provider's options by the provider's instance name, else by its
type (`entry`); the supervisor checks them (`check`) and the worker decodes them
once per job (`read`) into these Structs. A body field left out is `UNSET`, so
one given as null is still passed through as given. The objects sent as given
whose known fields are checked (Anthropic's `thinking`, Ollama's `options`) are
plain dicts in the Structs (`_SHAPES` checks them), as are OpenAI-compatible
servers' options, which are forwarded whole.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

#: Largest token count anywhere (prompt, output, budget).
MAX_TOKENS = 10_000_000
#: Longest pause a mock script may ask for, and the most chunks or steps it may play.
MAX_MOCK_DELAY_S = 3600.0
MAX_MOCK_CHUNKS = 1_000_000

Delay = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_MOCK_DELAY_S)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**53)]

_T = TypeVar("_T")
#: A body field passed through as given: `UNSET` when the request leaves it out (null is a value).
Given: TypeAlias = _T | UnsetType


class OptionsError(ValueError):
    """A `provider_options` entry that cannot be used, with a sentence saying why."""


class _Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class _Open(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An object the provider defines and may grow: the fields named are checked, others pass."""


# -- mock ------------------------------------------------------------------------------


class ToolCallStep(_Strict):
    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    id: str | None = None
    chunks: Annotated[int, msgspec.Meta(ge=1, le=MAX_MOCK_CHUNKS)] = 3  # fragments the argument JSON is cut into
    fragment_delay: Delay | None = None  # pause before each fragment
    hold: Delay | None = None  # pause after the last fragment, before the call ends


class ErrorStep(_Strict):
    error_class: str = "server_error"
    message: str = "mock failure"
    status: Annotated[int, msgspec.Meta(ge=100, le=599)] | None = None
    code: str | None = None
    retry_after: Delay | None = None
    attempts: Annotated[int, msgspec.Meta(ge=0, le=1000)] | None = None  # fail only on the first N attempts


class UsageStep(_Strict):
    input_tokens: Count = 0
    output_tokens: Count = 0
    reasoning_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0


class Step(_Strict):
    """One scripted step; set exactly one of its kinds (a `delay` may go with any)."""

    text: str | None = None
    reasoning: str | None = None
    signature: str | None = None
    redacted: str | None = None
    tool_call: ToolCallStep | None = None
    usage: UsageStep | None = None
    error: ErrorStep | None = None
    finish: str | None = None
    event: dict[str, Any] | None = None
    delay: Delay | None = None
    stall: bool = False
    crash: bool = False


class MockOptions(_Strict):
    steps: list[Step] | None = None
    turns: list[list[Step]] | None = None  # turn n is played when the history holds n assistant turns
    delay: Delay = 0.0  # pause between the chunks of the default echo
    repeat: Annotated[int, msgspec.Meta(ge=1, le=MAX_MOCK_CHUNKS)] = 1  # play the text steps this many times
    model: str | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and self.turns is not None:
            raise ValueError("give `steps` (one reply) or `turns` (one reply per assistant turn), not both")
        longest = max([len(self.steps or [])] + [len(t) for t in self.turns or []])
        if longest * self.repeat > MAX_MOCK_CHUNKS:
            raise ValueError(
                f"{longest} steps repeated {self.repeat} times is over the {MAX_MOCK_CHUNKS} steps "
                "a mock script may play"
            )


#: A string sent in an HTTP header: no control characters (a line break would start a
#: header of the caller's choosing) and nothing but ASCII, which is all a header carries.
HeaderValue = Annotated[str, msgspec.Meta(pattern=r"^[\x20-\x7e]*$")]


# -- Anthropic Messages ----------------------------------------------------------------------


class AnthropicThinking(_Open):
    """The checked fields of `AnthropicOptions.thinking` (sent as given, other fields and all)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, msgspec.Meta(ge=1024, le=MAX_TOKENS)] | None = None


class AnthropicOptions(_Strict):
    thinking: dict[str, Any] | None = None  # sent as given instead of what the effort makes (AnthropicThinking)
    auto_cache: bool = True  # cache breakpoints on the system prompt, tools and the conversation
    beta_headers: list[HeaderValue] | HeaderValue | None = None  # the `anthropic-beta` header
    tools: list[dict[str, Any]] | None = None  # server tools (web search, code execution...), appended
    # Body fields passed through as given.
    top_k: Given[Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None] = UNSET
    service_tier: Given[str | None] = UNSET
    container: Given[Any] = UNSET
    context_management: Given[Any] = UNSET
    inference_geo: Given[Any] = UNSET
    mcp_servers: Given[Any] = UNSET
    metadata: Given[Any] = UNSET
    output_config: Given[Any] = UNSET
    cache_control: Given[Any] = UNSET
    extra_body: dict[str, Any] | None = None


# -- OpenAI Responses -----------------------------------------------------------------------


class OpenAIOptions(_Strict):
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = "auto"  # null: no summaries
    include: list[str] | None = None
    background: bool = False  # OpenAI keeps the response: a dropped stream is resumed
    # Body fields passed through as given.
    service_tier: Given[str | None] = UNSET
    store: Given[bool | None] = UNSET
    metadata: Given[Any] = UNSET
    user: Given[str | None] = UNSET
    safety_identifier: Given[str | None] = UNSET
    prompt_cache_key: Given[str | None] = UNSET
    prompt_cache_retention: Given[str | None] = UNSET
    parallel_tool_calls: Given[bool | None] = UNSET
    max_tool_calls: Given[Annotated[int, msgspec.Meta(ge=1)] | None] = UNSET
    truncation: Given[str | None] = UNSET
    text: Given[Any] = UNSET
    reasoning: Given[Any] = UNSET
    tools: Given[Any] = UNSET
    top_logprobs: Given[Annotated[int, msgspec.Meta(ge=0, le=20)] | None] = UNSET
    conversation: Given[Any] = UNSET
    previous_response_id: Given[str | None] = UNSET
    prompt: Given[Any] = UNSET
    context_management: Given[Any] = UNSET
    stream_options: Given[Any] = UNSET
    extra_body: dict[str, Any] | None = None


# -- Gemini ---------------------------------------------------------------------------------


class GeminiOptions(_Strict):
    # Shorthand server tools (True, or the tool's own configuration object).
    google_search: bool | dict[str, Any] | None = None
    code_execution: bool | dict[str, Any] | None = None
    url_context: bool | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None  # more tools, appended as given
    thinking_config: dict[str, Any] | None = None
    generation_config: dict[str, Any] | None = None  # merged over what trunkline sets
    # Body fields passed through as given (the snake_case spellings become camelCase).
    safety_settings: Given[Any] = UNSET
    safetySettings: Given[Any] = UNSET
    cached_content: Given[str | None] = UNSET
    cachedContent: Given[str | None] = UNSET
    labels: Given[dict[str, str] | None] = UNSET
    service_tier: Given[str | None] = UNSET
    serviceTier: Given[str | None] = UNSET
    store: Given[bool | None] = UNSET
    tool_config: Given[Any] = UNSET
    toolConfig: Given[Any] = UNSET
    extra_body: dict[str, Any] | None = None


# -- Ollama ---------------------------------------------------------------------------------


class OllamaModelOptions(_Open):
    """The checked fields of `OllamaOptions.options`, Ollama's model options (Modelfile
    parameters, sent as given): the ones with a range."""

    top_k: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None = None
    num_ctx: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)] | None = None
    num_predict: Annotated[int, msgspec.Meta(ge=-2, le=MAX_TOKENS)] | None = None


class OllamaOptions(_Strict):
    options: dict[str, Any] | None = None  # merged over the model options trunkline sets (OllamaModelOptions)
    keep_alive: str | int | float | None = None
    think: bool | Literal["low", "medium", "high"] | None = None
    # Body fields passed through as given.
    format: Given[Any] = UNSET
    truncate: Given[bool | None] = UNSET
    shift: Given[bool | None] = UNSET
    logprobs: Given[bool | None] = UNSET
    top_logprobs: Given[int | None] = UNSET
    extra_body: dict[str, Any] | None = None


# -- OpenAI-compatible servers (Chat Completions) ---------------------------------------------


class OpenAICompatOptions(_Open):
    """Forwarded as given; these are checked because servers differ on them."""

    top_k: Annotated[int, msgspec.Meta(ge=-1, le=MAX_TOKENS)] | None = None
    extra_body: dict[str, Any] | None = None


#: Chat Completions body fields and the extensions common OpenAI-compatible servers take
#: (vLLM, llama.cpp, LM Studio, SGLang, OpenRouter...): forwarded without a warning.
OPENAI_COMPAT_KNOWN = frozenset(
    {
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "n",
        "user",
        "service_tier",
        "store",
        "metadata",
        "parallel_tool_calls",
        "prediction",
        "modalities",
        "audio",
        "web_search_options",
        "verbosity",
        "reasoning",
        "reasoning_effort",
        "stream_options",
        "response_format",
        "seed",
        "stop",
        "max_completion_tokens",
        "safety_identifier",
        "prompt_cache_key",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "structured_outputs",
        "chat_template_kwargs",
        "chat_template",
        "add_generation_prompt",
        "skip_special_tokens",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "best_of",
        "use_beam_search",
        "length_penalty",
        "typical_p",
        "tfs_z",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "grammar",
        "json_schema",
        "cache_prompt",
        "n_probs",
        "samplers",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "xtc_probability",
        "xtc_threshold",
        "ttl",
        "draft_model",
        "provider",
        "models",
        "route",
        "transforms",
        "usage",
        "plugins",
        "top_a",
        "separate_reasoning",
        "enable_thinking",
        "thinking",
        "return_reasoning",
        "extra_body",
    }
)

SCHEMAS: dict[str, type[msgspec.Struct]] = {
    "mock": MockOptions,
    "anthropic": AnthropicOptions,
    "openai": OpenAIOptions,
    "gemini": GeminiOptions,
    "ollama": OllamaOptions,
    "openai_compat": OpenAICompatOptions,
}
#: Objects sent as given whose known fields are checked: provider type -> option -> its checked fields.
_SHAPES: dict[str, dict[str, type[msgspec.Struct]]] = {
    "anthropic": {"thinking": AnthropicThinking},
    "ollama": {"options": OllamaModelOptions},
}
#: The body fields of each schema: the ones declared `Given`, passed through as given.
PASSED: dict[type[msgspec.Struct], frozenset[str]] = {
    schema: frozenset(f.name for f in msgspec.structs.fields(schema) if f.default is UNSET)
    for schema in SCHEMAS.values()
}
#: What people type for an option of another name.
ALIASES = {
    "beta_features": "beta_headers",
    "betas": "beta_headers",
    "anthropic_beta": "beta_headers",
    "anthropic-beta": "beta_headers",
    "keepalive": "keep_alive",
}


def known(provider_type: str) -> frozenset[str]:
    if provider_type == "openai_compat":
        return OPENAI_COMPAT_KNOWN
    schema = SCHEMAS.get(provider_type)
    return frozenset(schema.__struct_fields__) if schema is not None else frozenset()


def unknown_keys(provider_type: str, options: Mapping[str, Any]) -> list[str]:
    names = known(provider_type)
    return [k for k in options if k not in names]


def explain_unknown(provider_type: str, where: str, key: str) -> str:
    names = sorted(known(provider_type))
    guess = ALIASES.get(key) if ALIASES.get(key) in names else None
    if guess is None:
        import difflib  # a mistake's hint only: not at every process's start

        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        guess = close[0] if close else None
    hint = f"did you mean `{guess}`? " if guess else ""
    return (
        f"{where}: unknown option `{key}`; {hint}To send a field trunkline does not know, put it in "
        f"`{where}.extra_body`. Known options: {', '.join(n for n in names if n != 'extra_body')}"
    )


def check(provider_type: str, options: Any, where: str) -> msgspec.Struct | None:
    """The options as their schema (None for a provider type without one); OptionsError
    for an unknown key (except on OpenAI-compatible servers) or a value out of bounds."""
    schema = SCHEMAS.get(provider_type)
    if schema is None or options is None:
        return None
    if type(options) is not dict:
        raise OptionsError(f"{where} must be an object, got {type(options).__name__}")
    if provider_type != "openai_compat":
        for key in options:
            if key not in schema.__struct_fields__:
                raise OptionsError(explain_unknown(provider_type, where, key))
    try:
        checked = msgspec.convert(options, schema)
    except msgspec.ValidationError as exc:
        raise OptionsError(_explain(str(exc), where, options)) from None
    for name, shape in _SHAPES.get(provider_type, {}).items():
        value = options.get(name)
        if value is None:
            continue
        try:
            msgspec.convert(value, shape)
        except msgspec.ValidationError as exc:
            # Named from the options' root, as an error in the whole schema would be.
            text = str(exc)
            text = text.replace(" - at `$", f" - at `$.{name}", 1) if " - at `$" in text else f"{text} - at `$.{name}`"
            raise OptionsError(_explain(text, where, options)) from None
    return checked


_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def _explain(message: str, where: str, options: Any) -> str:
    """msgspec says `Expected ... - at `$.steps[0].delay``: name the place as the request
    does, and the value found there."""
    text, sep, path = message.rpartition(" - at `")
    if not sep:
        return f"{where}: {message}"
    path = path.rstrip("`")
    value: Any = options
    for name, index in _STEP.findall(path):
        try:
            value = value[name] if name else value[int(index)]
        except (KeyError, IndexError, TypeError):
            value = None
            break
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return f"{path.replace('$', where, 1)} is {shown}: {text[0].lower()}{text[1:]}"


#: What a worker reads: its type's Struct, or for an OpenAI-compatible server the mapping itself
#: (every key of it is forwarded as given, so there is nothing more to read from it).
Options: TypeAlias = msgspec.Struct | Mapping[str, Any]
_S = TypeVar("_S", bound=msgspec.Struct)


def entry(provider_options: Mapping[str, dict[str, Any]], name: str, provider_type: str) -> tuple[str, dict[str, Any]]:
    """Where a request keeps the options of provider instance `name`, and what they are:
    under its name when that entry is not empty, else under its type (`{}` if neither)."""
    mine = provider_options.get(name)
    if mine:
        return name, mine
    return provider_type, provider_options.get(provider_type) or {}


def decode(schema: type[_S], options: Mapping[str, Any], where: str) -> _S:
    """`options` as `schema`, without the checks for unknown keys that `check` makes first
    (a Struct refuses them anyway, save an OpenAI-compatible server's); OptionsError if
    they do not fit."""
    try:
        return msgspec.convert(options, schema)
    except msgspec.ValidationError as exc:
        raise OptionsError(_explain(str(exc), where, options)) from None


def read(provider_options: Mapping[str, dict[str, Any]], name: str, provider_type: str) -> Options:
    """The options a request gives provider instance `name` of `provider_type`, decoded
    (the supervisor has checked them with the same schema)."""
    key, options = entry(provider_options, name, provider_type)
    schema = SCHEMAS.get(provider_type)
    if schema is None or schema is OpenAICompatOptions:
        return options
    return decode(schema, options, f"provider_options.{key}")


def body_fields(options: Options) -> dict[str, Any]:
    """What of `options` goes into the provider's body: the pass-through fields as given,
    then `extra_body`'s, which win. For an OpenAI-compatible server, every key."""
    if isinstance(options, Mapping):
        out = {k: v for k, v in options.items() if k != "extra_body"}
        extra = options.get("extra_body")
    else:
        # The Structs omit what is left at its default, and an unset body field always.
        passed = PASSED.get(type(options), frozenset())
        out = {k: v for k, v in msgspec.to_builtins(options).items() if k in passed}
        extra = getattr(options, "extra_body", None)
    if isinstance(extra, dict):
        out.update(extra)
    return out


def service_tier(options: Options) -> str | None:
    """The service tier `options` ask for (it multiplies the price), in either spelling."""
    match options:
        case AnthropicOptions(service_tier=str() as tier) | OpenAIOptions(service_tier=str() as tier):
            return tier
        case GeminiOptions(service_tier=str() as tier) | GeminiOptions(serviceTier=str() as tier):
            return tier
        case Mapping():
            named = options.get("service_tier")
            return named if isinstance(named, str) else None
    return None
