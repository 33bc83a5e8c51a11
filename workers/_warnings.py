"""Warnings a request translator attaches: what a provider could not honour exactly."""

from __future__ import annotations

from ..protocol.messages import WarningInfo


def warn(warnings: list[WarningInfo], code: str, message: str) -> None:
    """Add a warning once, however many parts of the request trigger it."""
    if not any(w.code == code and w.message == message for w in warnings):
        warnings.append(WarningInfo(code=code, message=message))
