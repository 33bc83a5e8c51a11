"""The trunkline wire protocol: messages, codec, schema. Imports nothing else of trunkline."""

__version__ = "0.1.0"

from .messages import *  # noqa: F403 - the package is the protocol: every message type at its top
from .messages import PROTOCOL_VERSION as PROTOCOL_VERSION
from .messages import RETRYABLE as RETRYABLE

__all__ = [name for name in dir() if not name.startswith("_")]  # re-exported message types
