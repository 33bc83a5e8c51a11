"""Ollama's native API (`POST {base_url}/api/chat`, NDJSON streams)."""
