"""The offline, deterministic `mock` provider: an echo by default, scriptable per request."""
