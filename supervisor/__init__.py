"""The supervisor: one process that owns the sockets, the workers and the request table."""
