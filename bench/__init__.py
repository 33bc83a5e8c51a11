"""trunkline's benchmark: the daemon against the physical floor and against LiteLLM,
in one run, against one fake upstream. `python -m bench --help`; see bench/README.md."""
