"""Local files named by `path` parts, read by the client itself.

The daemon never opens a path a client names (it may run with other rights, on
another machine, for other users), so before a request goes out every image,
audio or document part given by `path` becomes base64 `data` here. Only
regular files are read (a FIFO or a device could hang or never end), a
symbolic link may not lead out of the directory the path names, and a file may
be at most three quarters of the daemon's `max_message_bytes` (base64 makes it
a third larger; 12 MiB with the default 16 MiB limit). Reading happens in a
worker thread, never on the event loop.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .errors import InvalidRequestError
from .protocol.messages import AudioPart, DocumentPart, ErrorInfo, ImagePart, Request, ToolResultPart

#: Used when the daemon's limit is not known yet: three quarters of the default 16 MiB.
DEFAULT_MAX_FILE_BYTES = 12 * 1024 * 1024

_MEDIA = (ImagePart, AudioPart, DocumentPart)


def max_file_bytes(max_message_bytes: int | None) -> int:
    """The largest file whose base64 still fits a message of `max_message_bytes`."""
    return max_message_bytes * 3 // 4 if max_message_bytes else DEFAULT_MAX_FILE_BYTES


def _refuse(message: str) -> InvalidRequestError:
    return InvalidRequestError(ErrorInfo(error_class="invalid_request", message=message))


def read_local_file(path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, or `InvalidRequestError` saying why not."""
    named = Path(path).expanduser()
    try:
        folder = named.parent.resolve(strict=True)
        real = named.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise _refuse(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if real.parent != folder and folder not in real.parents:
        raise _refuse(f"{path} is a symbolic link to {real}, outside {folder}: not read")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: the resolved
        # name must not have become a link since.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _refuse(f"cannot read {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(f"{path} is not a regular file: only regular files are read")
        if info.st_size > max_bytes:
            raise _refuse(f"{path} is {info.st_size} bytes, over the {max_bytes}-byte limit for a file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _refuse(f"{path} grew past the {max_bytes}-byte limit for a file while it was read")
    return data


def _inline(part: Any, max_bytes: int) -> Any:
    if type(part) is ToolResultPart and not isinstance(part.content, str):
        return msgspec.structs.replace(part, content=[_inline(p, max_bytes) for p in part.content])
    if type(part) in _MEDIA and part.path is not None:
        media_type = part.media_type or mimetypes.guess_type(part.path)[0]
        if media_type is None:
            raise _refuse(f"cannot tell the media type of {part.path}; set media_type")
        data = base64.b64encode(read_local_file(part.path, max_bytes)).decode()
        return msgspec.structs.replace(part, path=None, data=data, media_type=media_type)
    return part


def _has_path(part: Any) -> bool:
    if type(part) is ToolResultPart and not isinstance(part.content, str):
        return any(_has_path(p) for p in part.content)
    return type(part) in _MEDIA and part.path is not None


def has_local_files(request: Request) -> bool:
    return any(_has_path(p) for m in request.messages for p in m.content)


def inline_local_files_sync(request: Request, max_bytes: int) -> Request:
    """`request` with every `path` part turned into base64 `data` (a copy if any was)."""
    if not has_local_files(request):
        return request
    messages = [
        msgspec.structs.replace(m, content=[_inline(p, max_bytes) for p in m.content]) for m in request.messages
    ]
    return msgspec.structs.replace(request, messages=messages)


async def inline_local_files(request: Request, max_bytes: int) -> Request:
    """As `inline_local_files_sync`, the reading done in a worker thread."""
    if not has_local_files(request):
        return request
    return await anyio.to_thread.run_sync(inline_local_files_sync, request, max_bytes)
