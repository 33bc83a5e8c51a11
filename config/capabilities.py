"""Honest declarations of what each provider type's implementation carries.

A model's catalog entry says what the model can do; these say what our code for
that provider type can carry. A request needs both: the catalog meets the two
once, when it is loaded (`for_model`), and the supervisor refuses a request that
uses anything the result lacks before any provider is called (seed 000 §3.4).
They live here, not beside each worker, because the supervisor must not import
worker code; each `workers/<type>/capabilities.py` names its own entry.
"""

from __future__ import annotations

import msgspec

from ..protocol.messages import Capabilities, ModelInfo

IMPLEMENTATIONS: dict[str, Capabilities] = {
    "anthropic": Capabilities(
        tools=True,
        parallel_tool_calls=True,
        vision=True,
        documents=True,  # PDF and plain-text documents
        audio=False,  # the Messages API has no audio input
        reasoning=True,  # extended thinking, with signatures and redacted thinking kept for the next turn
        structured_output=True,  # output_config.format json_schema
        streaming=True,
        prompt_caching=True,  # automatic cache_control breakpoints
        prefill=True,  # the answer continues a last assistant message (where the model's rules allow it)
    ),
    "gemini": Capabilities(
        tools=True,
        parallel_tool_calls=True,
        vision=True,
        documents=True,  # PDF and text as inlineData / fileData
        audio=True,  # audio as inlineData / fileData
        reasoning=True,  # thinkingConfig; thought signatures kept per part for the next turn
        structured_output=True,  # responseMimeType + responseJsonSchema
        streaming=True,
        prompt_caching=True,  # implicit caching, and cachedContent through provider_options.gemini
    ),
    # Everything it can script, honestly; no prefill, so the refusal can be seen offline.
    "mock": Capabilities(
        tools=True,
        parallel_tool_calls=True,
        vision=True,
        documents=True,
        audio=True,
        reasoning=True,
        structured_output=True,
        streaming=True,
    ),
    "ollama": Capabilities(
        tools=True,  # but tool_choice required / named cannot be enforced (warned)
        parallel_tool_calls=True,
        vision=True,  # base64 images only; URLs are dropped with a warning
        documents=False,
        audio=False,
        reasoning=True,  # `think` and `message.thinking`
        structured_output=True,  # `format` with the JSON schema
        streaming=True,
    ),
    "openai": Capabilities(  # the Responses API
        tools=True,
        parallel_tool_calls=True,
        vision=True,  # input_image by URL or data URI, with detail
        documents=True,  # input_file: PDFs and other documents by data or URL
        audio=False,  # the Responses API takes no audio input
        reasoning=True,  # reasoning items round-trip with their encrypted content; summaries streamed
        structured_output=True,  # text.format json_schema
        streaming=True,
        prompt_caching=True,  # automatic at OpenAI; prompt_cache_key passes through; cached tokens read
    ),
    "openai_compat": Capabilities(  # Chat Completions
        tools=True,
        parallel_tool_calls=True,
        vision=True,  # image_url parts, URLs or data URIs
        documents=False,
        audio=False,
        reasoning=True,  # reasoning_effort sent; reasoning_content / reasoning deltas read
        structured_output=True,  # response_format json_schema
        streaming=True,
        prompt_caching=False,  # servers cache on their own; cached_tokens is read when reported
    ),
}

#: Each capability as a person would name it in a refusal.
NAMES: dict[str, str] = {
    "tools": "tools",
    "parallel_tool_calls": "parallel tool calls",
    "vision": "images",
    "documents": "documents",
    "audio": "audio input",
    "reasoning": "reasoning",
    "structured_output": "structured output",
    "streaming": "streaming",
    "prompt_caching": "prompt caching",
    "prefill": "assistant prefill",
}


def for_model(implementation: Capabilities, model: ModelInfo) -> Capabilities:
    """What a request to `model` through `implementation` may use. A model the catalog
    does not list has permissive flags, so the implementation alone decides."""
    return Capabilities(
        tools=implementation.tools and model.tools,
        parallel_tool_calls=implementation.parallel_tool_calls and model.tools,
        vision=implementation.vision and model.vision,
        documents=implementation.documents and model.vision,
        # The catalog has no audio flag: a model that reads no images is taken as text-only.
        audio=implementation.audio and model.vision,
        reasoning=implementation.reasoning and model.reasoning,
        structured_output=implementation.structured_output and model.structured_output,
        streaming=implementation.streaming and model.streaming,
        prompt_caching=implementation.prompt_caching,
        prefill=implementation.prefill and model.rules.prefill is not False,
    )


def with_capabilities(model: ModelInfo, provider_type: str | None) -> ModelInfo:
    """`model` with the capabilities of its provider's implementation; unchanged when the
    provider type has none declared (its own catalog flags stay the only check)."""
    implementation = IMPLEMENTATIONS.get(provider_type or model.provider)
    if implementation is None:
        return model
    return msgspec.structs.replace(model, capabilities=for_model(implementation, model))


def provider_types_with(name: str) -> list[str]:
    """The provider types whose implementation carries capability `name`."""
    return sorted(t for t, c in IMPLEMENTATIONS.items() if getattr(c, name))
