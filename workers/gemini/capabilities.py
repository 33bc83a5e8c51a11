"""What this Gemini implementation carries (a model's own limits come from the catalog)."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,
    parallel_tool_calls=True,
    vision=True,
    documents=True,  # PDF and text as inlineData / fileData
    audio=True,  # audio as inlineData / fileData
    reasoning=True,  # thinkingConfig; thought signatures kept per part for the next turn
    structured_output=True,  # responseMimeType + responseJsonSchema
    streaming=True,
    prompt_caching=True,  # implicit caching, and cachedContent through provider_options.gemini
)
