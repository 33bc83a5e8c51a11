"""Which opaque provider parts (`ProviderPart`) a request translator may send back.

A part is meaningful only to the wire API that produced it and, where the
provider ties it to a model, to that model; anywhere else it would be refused
(or worse, misread), so it is dropped and the caller is told once.
"""

from __future__ import annotations

from ..protocol.messages import ProviderPart, WarningInfo
from ._warnings import warn


def keep_provider_part(part: ProviderPart, api: str, wire_model: str, warnings: list[WarningInfo]) -> bool:
    """True when `part` can go back verbatim to `api` serving `wire_model`; else warn."""
    if part.api != api:
        warn(
            warnings,
            "provider_part_dropped",
            f"{part.api} content ({part.kind}) has no equivalent on {api}; it was left out",
        )
        return False
    if part.model is not None and part.model != wire_model:
        warn(
            warnings,
            "provider_part_dropped",
            f"{part.api} content ({part.kind}) belongs to model {part.model}; it was left out for {wire_model}",
        )
        return False
    return True
