"""The client reads the local files a request names (the daemon never does)."""

from __future__ import annotations

import base64
import os

import pytest
import trio

from trunkline import Message, Request
from trunkline.errors import InvalidRequestError
from trunkline.files import inline_local_files, inline_local_files_sync, read_local_file
from trunkline.protocol.messages import DocumentPart, ImagePart, ToolCallPart, ToolResultPart

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 10


def with_parts(*parts) -> Request:
    return Request(model="mock:echo", messages=[Message.user("look", *parts)])


def test_path_parts_become_base64_data(tmp_path):
    (tmp_path / "cat.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("hello")
    request = with_parts(
        ImagePart(path=str(tmp_path / "cat.png")), DocumentPart(path=str(tmp_path / "notes.txt"), name="n")
    )
    out = inline_local_files_sync(request, 1024)
    image, doc = out.messages[0].content[1:]
    assert (image.path, image.media_type, base64.b64decode(image.data)) == (None, "image/png", PNG)
    assert (doc.path, doc.media_type, doc.name, base64.b64decode(doc.data)) == (None, "text/plain", "n", b"hello")
    assert request.messages[0].content[1].path is not None  # the caller's request is left as it was


def test_images_inside_tool_results_are_read_too(tmp_path):
    (tmp_path / "shot.png").write_bytes(PNG)
    call = ToolCallPart(id="tu_1", name="screenshot")
    request = Request(
        model="mock:echo",
        messages=[
            Message.user("x"),
            Message(role="assistant", content=[call]),
            Message(
                role="tool",
                content=[ToolResultPart(tool_call_id="tu_1", content=[ImagePart(path=str(tmp_path / "shot.png"))])],
            ),
        ],
    )
    out = inline_local_files_sync(request, 1024)
    assert base64.b64decode(out.messages[2].content[0].content[0].data) == PNG


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(InvalidRequestError, match="not a regular file"):
        read_local_file(str(fifo), 1024)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/proc"])
def test_devices_and_directories_are_refused(device):
    with pytest.raises(InvalidRequestError, match=r"not a regular file|cannot read"):
        read_local_file(device, 1024)


def test_a_symlink_out_of_its_directory_is_refused(tmp_path):
    (tmp_path / "secret.txt").write_text("key")
    inside = tmp_path / "docs"
    inside.mkdir()
    (inside / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (inside / "real.txt").write_text("ok")
    (inside / "alias.txt").symlink_to(inside / "real.txt")
    with pytest.raises(InvalidRequestError, match="outside"):
        read_local_file(str(inside / "leak.txt"), 1024)
    assert read_local_file(str(inside / "alias.txt"), 1024) == b"ok"  # a link within the directory is fine


def test_a_file_over_the_cap_is_refused(tmp_path):
    big = tmp_path / "big.pdf"
    big.write_bytes(b"x" * 2049)
    with pytest.raises(InvalidRequestError, match="2049 bytes, over the 2048-byte limit"):
        read_local_file(str(big), 2048)


def test_missing_file_and_unknown_media_type(tmp_path):
    with pytest.raises(InvalidRequestError, match="cannot read"):
        inline_local_files_sync(with_parts(ImagePart(path=str(tmp_path / "missing.png"))), 1024)
    (tmp_path / "blob").write_bytes(b"?")
    with pytest.raises(InvalidRequestError, match="set media_type"):
        inline_local_files_sync(with_parts(ImagePart(path=str(tmp_path / "blob"))), 1024)


async def test_reading_happens_off_the_event_loop(tmp_path, monkeypatch):
    (tmp_path / "cat.png").write_bytes(PNG)
    loop_thread = trio.lowlevel.current_trio_token()
    seen = []
    real = read_local_file

    def spy(path, max_bytes):
        try:
            trio.lowlevel.current_trio_token()
            seen.append("loop")
        except RuntimeError:
            seen.append("thread")
        return real(path, max_bytes)

    monkeypatch.setattr("trunkline.files.read_local_file", spy)
    out = await inline_local_files(with_parts(ImagePart(path=str(tmp_path / "cat.png"))), 1024)
    assert seen == ["thread"] and loop_thread is not None
    assert base64.b64decode(out.messages[0].content[1].data) == PNG
