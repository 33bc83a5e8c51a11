"""Provider workers: the shared runtime and one package per provider."""
