"""Admission: which deployment serves a request, and whether the client key and the
deployment may take it now (limits, budgets, cooldowns, a request id already seen),
decided in one step against a store: the daemon's memory, or a Redis shared by
several daemons."""
