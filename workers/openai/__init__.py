"""OpenAI's native Responses API (`POST /v1/responses`): reasoning items, built-in tools,
background mode. Chat Completions servers are `openai_compat`."""
