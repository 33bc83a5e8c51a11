"""What this Gemini implementation carries (a model's own limits come from the catalog).

Declared in config/capabilities.py, where the supervisor reads it before dispatch.
"""

from __future__ import annotations

from ..capabilities import IMPLEMENTATIONS

SUPPORTS = IMPLEMENTATIONS["gemini"]
