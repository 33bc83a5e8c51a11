"""Images, audio and documents given as local file paths, read for the wire.

Part of the runtime because it touches the file system; translators receive
what this returns and stay pure.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

import msgspec

from ..protocol.messages import AudioPart, DocumentPart, ImagePart, Request, ToolResultPart
from .errors import ProviderError

#: Larger files are refused before any provider call; providers cap requests near here anyway.
MAX_FILE_BYTES = 32 * 1024 * 1024


def read_file(path: str, media_type: str | None) -> tuple[str, str]:
    """(media type, base64 data) of a local file, or an `invalid_request` error."""
    p = Path(path).expanduser()
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ProviderError("invalid_request", f"{path} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit")
        data = p.read_bytes()
    except OSError as exc:
        raise ProviderError("invalid_request", f"cannot read {path}: {exc.strerror}") from None
    kind = media_type or mimetypes.guess_type(p.name)[0]
    if kind is None:
        raise ProviderError("invalid_request", f"cannot tell the media type of {path}; set media_type")
    return kind, base64.b64encode(data).decode()


def inline_files(request: Request) -> Request:
    """`request` with every part given by `path` turned into base64 `data` (a copy
    when anything changed), so request translators never read files themselves."""
    if not any(_has_path(p) for m in request.messages for p in m.content):
        return request
    messages = []
    for message in request.messages:
        content = [_inline(p) for p in message.content]
        messages.append(msgspec.structs.replace(message, content=content))
    return msgspec.structs.replace(request, messages=messages)


def _has_path(part: object) -> bool:
    if isinstance(part, ToolResultPart) and not isinstance(part.content, str):
        return any(_has_path(p) for p in part.content)
    return isinstance(part, (ImagePart, AudioPart, DocumentPart)) and part.path is not None


def _inline(part: Any) -> Any:
    if isinstance(part, ToolResultPart) and not isinstance(part.content, str):
        return msgspec.structs.replace(part, content=[_inline(p) for p in part.content])
    if isinstance(part, (ImagePart, AudioPart, DocumentPart)) and part.path is not None:
        media_type, data = read_file(part.path, part.media_type)
        return msgspec.structs.replace(part, path=None, data=data, media_type=media_type)
    return part
