"""Anthropic's native Messages API (`POST /v1/messages`)."""
