"""What the mock implementation supports: everything it can script, honestly."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,
    parallel_tool_calls=True,
    vision=True,
    documents=True,
    audio=True,
    reasoning=True,
    structured_output=True,
    streaming=True,
    prompt_caching=False,
)
