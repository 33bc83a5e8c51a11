"""What this Chat Completions implementation carries."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,
    parallel_tool_calls=True,
    vision=True,  # image_url parts, URLs or data URIs
    documents=False,  # dropped with a warning
    audio=False,  # dropped with a warning
    reasoning=True,  # reasoning_effort sent; reasoning_content / reasoning deltas read
    structured_output=True,  # response_format json_schema
    streaming=True,
    prompt_caching=False,  # servers cache on their own; cached_tokens is read when reported
)
