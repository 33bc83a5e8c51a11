"""What this Anthropic implementation carries (a model's own limits come from the catalog)."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,
    parallel_tool_calls=True,
    vision=True,
    documents=True,  # PDF and plain-text documents
    audio=False,  # the Messages API has no audio input: audio parts are dropped with a warning
    reasoning=True,  # extended thinking, with signatures and redacted thinking kept for the next turn
    structured_output=True,  # output_config.format json_schema
    streaming=True,
    prompt_caching=True,  # automatic cache_control breakpoints
)
