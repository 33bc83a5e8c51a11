"""What the mock implementation supports: everything it can script, honestly.

Declared in config/capabilities.py, where the supervisor reads it before dispatch.
"""

from __future__ import annotations

from ..capabilities import IMPLEMENTATIONS

SUPPORTS = IMPLEMENTATIONS["mock"]
