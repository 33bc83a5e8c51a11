"""Honest declarations of what each implementation supports.

They are declared in `config/capabilities.py`, by provider type, because the
supervisor checks every request against them before dispatch and must not import
worker code; each provider folder's `capabilities.py` names its own entry.
"""

from __future__ import annotations

from ..config.capabilities import IMPLEMENTATIONS, for_model
from ..protocol.messages import Capabilities

__all__ = ["IMPLEMENTATIONS", "Capabilities", "for_model"]
