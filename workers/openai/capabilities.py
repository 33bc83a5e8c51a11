"""What this Responses implementation carries (a model's own limits come from the catalog)."""

from __future__ import annotations

from ..capabilities import Capabilities

SUPPORTS = Capabilities(
    tools=True,
    parallel_tool_calls=True,
    vision=True,  # input_image by URL or data URI, with detail
    documents=True,  # input_file: PDFs and other documents by data or URL
    audio=False,  # the Responses API takes no audio input: an audio part is an invalid_request
    reasoning=True,  # reasoning items round-trip with their encrypted content; summaries streamed
    structured_output=True,  # text.format json_schema
    streaming=True,
    prompt_caching=True,  # automatic at OpenAI; prompt_cache_key passes through; cached tokens read
)
