"""The daemon's line per request: noted at the request's end, written in a batch by the
housekeeping tick (or once enough wait), with the outcome and the time of the end;
and the daemon's log handler, which writes a batch's lines to the file in one go and
every other record at once.

A real `Daemon` (no sockets: its publisher is a list), driven as its worker links and
housekeeping drive it."""

from __future__ import annotations

import fcntl
import logging
import os
from typing import Any

import pytest
import trio

from fakes.bare_daemon import Published, running
from trunkline.config.loader import load_config
from trunkline.protocol.codec import frame_event
from trunkline.protocol.messages import (
    ErrorEvent,
    ErrorInfo,
    Finish,
    FinishReason,
    Message,
    Relay,
    Response,
    Usage,
)
from trunkline.supervisor import request_log
from trunkline.supervisor.daemon import Daemon
from trunkline.supervisor.request_log import DAEMON_FORMAT, MAX_PENDING, BatchingStreamHandler, RequestLog


def end(d: Daemon, request_id: str, event: Any) -> None:
    event.request_id, event.seq = request_id, 0
    d.events.relay(Relay(request_id=request_id, frames=[frame_event("c1", event)], last_seq=0, terminal=True))


def finish(output_tokens: int) -> Finish:
    return Finish(
        response=Response(
            message=Message(role="assistant", content="ok"),
            finish_reason=FinishReason(reason="stop"),
            usage=Usage(input_tokens=12, output_tokens=output_tokens, total_tokens=12 + output_tokens),
        )
    )


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]


async def test_lines_wait_for_the_flush_and_say_how_each_request_ended(daemon, caplog):
    caplog.set_level(logging.INFO, logger="trunkline.supervisor")
    running(daemon, "r1", stream=False)
    running(daemon, "r2", stream=False)
    running(daemon, "r3", stream=False)
    end(daemon, "r1", finish(7))
    end(daemon, "r2", ErrorEvent(error=ErrorInfo(error_class="rate_limit", message="slow down", retryable=True)))
    daemon.events.fail_request(daemon.requests.active["r3"], "unavailable", "the worker died")
    assert lines(caplog) == []  # nothing written on the request's path
    assert daemon.events.request_log.flush() == 3
    written = lines(caplog)
    assert [line.split(" ")[1] for line in written] == ["r1", "r2", "r3"]
    assert "r1 mock:echo complete: stop, 12 in / 7 out in " in written[0]
    assert "r2 mock:echo complete: error rate_limit in " in written[1]
    assert "r3 mock:echo complete: error unavailable in " in written[2]
    assert daemon.events.request_log.flush() == 0  # each line once


async def test_a_line_keeps_the_time_its_request_ended(daemon, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="trunkline.supervisor")
    monkeypatch.setattr(request_log.time, "time", lambda: 1_800_000_000.25)
    running(daemon, "r1", stream=False)
    end(daemon, "r1", finish(1))
    monkeypatch.setattr(request_log.time, "time", lambda: 1_800_000_009.0)
    daemon.events.request_log.flush()
    (record,) = [r for r in caplog.records if r.getMessage().startswith("request ")]
    assert record.created == 1_800_000_000.25
    assert round(record.msecs) == 250


async def test_the_outcome_is_read_even_after_the_replay_ring_let_the_request_go(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trunkline.supervisor")
    config = load_config(None)
    config.replay.max_requests = 1  # the next request's end forgets this one's frames
    d = Daemon(config, runtime_dir=tmp_path)
    d.events.pub = Published()
    for n, rid in enumerate(("r1", "r2", "r3")):
        running(d, rid, stream=False)
        end(d, rid, finish(n + 1))
    assert "r1" not in d.requests.ended
    d.events.request_log.flush()
    assert [line.split(": ")[1].rsplit(" in ", 1)[0] for line in lines(caplog)] == [
        "stop, 12 in / 1 out",
        "stop, 12 in / 2 out",
        "stop, 12 in / 3 out",
    ]


async def test_housekeeping_writes_them_within_its_tick(daemon, caplog, autojump_clock):
    caplog.set_level(logging.INFO, logger="trunkline.supervisor")
    running(daemon, "r1", stream=False)
    end(daemon, "r1", finish(1))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._housekeeping)
        await trio.sleep(0.3)
        nursery.cancel_scope.cancel()
    assert len(lines(caplog)) == 1


def test_enough_waiting_lines_are_written_without_the_tick(caplog):
    caplog.set_level(logging.INFO, logger="tl.test")
    log = RequestLog(logging.getLogger("tl.test"))
    for n in range(MAX_PENDING - 1):
        log.note(f"r{n}", "mock:echo", True, "stop", 1.0)
    assert lines(caplog) == [] and len(log) == MAX_PENDING - 1
    log.note("last", "mock:echo", True, b"not a frame", 1.0)
    assert len(lines(caplog)) == MAX_PENDING and len(log) == 0
    assert lines(caplog)[-1].startswith("request last mock:echo stream: ended in ")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 20)
    except BlockingIOError:
        return b""


def test_the_handler_writes_a_batch_once_and_everything_else_at_once():
    read_end, write_end = os.pipe()
    fcntl.fcntl(read_end, fcntl.F_SETFL, fcntl.fcntl(read_end, fcntl.F_GETFL) | os.O_NONBLOCK)
    handler = BatchingStreamHandler(write_end)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger("tl.handler-test")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.info("started")
        assert _read(read_end) == b"INFO started\n"
        lines = RequestLog(log)
        lines.note("r1", "mock:echo", False, "stop, 1 in / 1 out", 2.0)
        lines.note("r2", "mock:echo", True, None, 3.0)
        record = log.makeRecord(log.name, logging.INFO, __file__, 0, "request %s", ("r0",), None)
        record.batched = True
        log.handle(record)  # a batch's line alone waits in the buffer
        assert _read(read_end) == b""
        lines.flush()
        assert _read(read_end).decode().splitlines() == [
            "INFO request r0",
            "INFO request r1 mock:echo complete: stop, 1 in / 1 out in 2 ms",
            "INFO request r2 mock:echo stream: ended in 3 ms",
        ]
        log.warning("then a warning")
        assert _read(read_end) == b"WARNING then a warning\n"
    finally:
        log.removeHandler(handler)
        os.close(read_end)
        os.close(write_end)


def _pipe_logger(name: str) -> tuple[logging.Logger, BatchingStreamHandler, int, int]:
    """A logger set up as the daemon's: its handler on a pipe, formatted by the daemon's format."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(read_end, fcntl.F_SETFL, fcntl.fcntl(read_end, fcntl.F_GETFL) | os.O_NONBLOCK)
    handler = BatchingStreamHandler(write_end)
    handler.setFormatter(logging.Formatter(DAEMON_FORMAT))
    log = logging.getLogger(name)
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return log, handler, read_end, write_end


def _note_the_same(log: RequestLog, monkeypatch: pytest.MonkeyPatch) -> None:
    # Across a second's end, a millisecond figure that a rounding would carry over, an
    # outcome read from a frame, and one from no frame at all.
    frame = frame_event("c1", ErrorEvent(request_id="r3", seq=0, error=ErrorInfo(error_class="timeout", message="x")))
    notes = [
        (1_800_000_000.25, "r1", "mock:echo", False, "stop, 1 in / 1 out", 2.4),
        (1_800_000_000.9996, "r2", "mock:echo", True, None, 3.5),
        (1_800_000_001.0, "r3", "openai:gpt-4o", False, frame, 1234.56),
    ]
    for at, rid, model, stream, outcome, ms in notes:
        monkeypatch.setattr(request_log.time, "time", lambda at=at: at)
        log.note(rid, model, stream, outcome, ms)


def test_the_daemons_own_handler_gets_the_lines_logging_would_write(monkeypatch):
    """Written straight to the daemon's handler, the lines are byte for byte what its
    records would have made; a filter anywhere on the way sends them through records."""
    direct, direct_handler, direct_read, direct_write = _pipe_logger("tl.direct-test")
    records, records_handler, records_read, records_write = _pipe_logger("tl.records-test")
    seen: list[str] = []
    records.addFilter(lambda record: seen.append(record.getMessage()) or True)
    try:
        assert request_log._direct_handler(direct) is direct_handler
        assert request_log._direct_handler(records) is None
        for log in (direct, records):
            lines = RequestLog(log)
            _note_the_same(lines, monkeypatch)
            assert lines.flush() == 3
        written = _read(direct_read)
        assert written.replace(b"tl.direct-test", b"") == _read(records_read).replace(b"tl.records-test", b"")
        assert len(seen) == 3  # the second logger's lines did go through records
        text = written.decode().splitlines()
        assert [line.split(" ", 2)[2] for line in text] == [
            "tl.direct-test INFO request r1 mock:echo complete: stop, 1 in / 1 out in 2 ms",
            "tl.direct-test INFO request r2 mock:echo stream: ended in 4 ms",
            "tl.direct-test INFO request r3 openai:gpt-4o complete: error timeout in 1235 ms",
        ]
        assert text[0].split(" ")[1].endswith(",250") and text[1].split(" ")[1].endswith(",999")
    finally:
        for log, handler in ((direct, direct_handler), (records, records_handler)):
            log.removeHandler(handler)
        for fd in (direct_read, direct_write, records_read, records_write):
            os.close(fd)


def test_lines_go_through_records_when_the_set_up_is_not_the_daemons():
    log, handler, read_end, write_end = _pipe_logger("tl.other-setup-test")
    try:
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        assert request_log._direct_handler(log) is None
        handler.setFormatter(logging.Formatter(DAEMON_FORMAT, datefmt="%H:%M"))
        assert request_log._direct_handler(log) is None
        handler.setFormatter(logging.Formatter(DAEMON_FORMAT))
        log.addHandler(logging.NullHandler())
        assert request_log._direct_handler(log) is None  # a second handler
    finally:
        log.handlers.clear()
        os.close(read_end)
        os.close(write_end)


def test_without_a_standard_error_file_the_daemon_logs_as_logging_does(monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    handler = request_log.daemon_log_handler()
    assert type(handler) is logging.StreamHandler
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    handler = request_log.daemon_log_handler()
    assert type(handler) is BatchingStreamHandler
