"""What this Ollama implementation carries."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,  # but tool_choice required / named cannot be enforced (warned)
    parallel_tool_calls=True,
    vision=True,  # base64 images only; URLs are dropped with a warning
    documents=False,
    audio=False,
    reasoning=True,  # `think` and `message.thinking`
    structured_output=True,  # `format` with the JSON schema
    streaming=True,
    prompt_caching=False,
)
