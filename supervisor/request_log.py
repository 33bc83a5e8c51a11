"""The daemon's line per request, written in batches off the request's path.

A request's end only notes what its line needs (references, no formatting); the
daemon's housekeeping tick, and its exit, write the noted lines, and the daemon's
log handler (`BatchingStreamHandler`) takes them into its buffer and writes them to
the file once for the batch. Written at each end, the line cost the supervisor
about 100-140 µs of CPU per request on the benchmark's two-core machine (logging's
record, its format and a `write` to the log file, each running cold between two
hops), a sixth of its work on a small request, against 11-17 µs for the same calls
run back to back. So the lines come at most one housekeeping tick late, with the
time the request ended. Every other record is written at once, as before.

Even batched, logging's record and its format were a third of the supervisor's own
work per request (about 25 µs of 78, `bench.own_work`). When the lines go where the
daemon sends them (its one handler, its format, no filter), they are formatted here,
the time text made once per second, and handed to that handler's stream in one
write: the same bytes, without a record each. Any other set-up (a test's capture,
a program that embeds the daemon with handlers of its own) gets the records, as
before.
"""

from __future__ import annotations

import io
import logging
import sys
import time

from .terminal import summary_in

#: Noted lines written at once, without waiting for the tick: a bound on what they hold
#: (a terminal frame each, which the replay ring may already have let go) and on how long
#: one write of them holds the event loop (a few milliseconds).
MAX_PENDING = 256

#: The daemon's log format (`supervisor.daemon.serve`): the lines the fast path writes
#: are the ones a `logging.Formatter` of it writes.
DAEMON_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class RequestLog:
    """`note` at each request's end (cheap), `flush` to write what was noted."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        # (wall-clock time of the end, request id, model, "stream"/"complete",
        #  the outcome, or the terminal frame it is read from, or None, duration in ms)
        self._pending: list[tuple[float, str, str, str, str | bytes | None, float]] = []

    @property
    def enabled(self) -> bool:
        return self.log.isEnabledFor(logging.INFO)

    def note(self, request_id: str, model: str, stream: bool, outcome: str | bytes | None, ms: float) -> None:
        """`outcome`: as the line says it, or the terminal frame to read it from at the
        write (the frame is the one the replay ring holds: not copied)."""
        pending = self._pending
        pending.append((time.time(), request_id, model, "stream" if stream else "complete", outcome, ms))
        if len(pending) >= MAX_PENDING:
            self.flush()

    def __len__(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write every noted line, oldest first; how many."""
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        log = self.log
        handler = _direct_handler(log)
        if handler is not None:
            _write_lines(handler, log.name, pending)
            return len(pending)
        for at, request_id, model, kind, outcome, ms in pending:
            if not isinstance(outcome, str):
                outcome = summary_in(outcome).outcome() if outcome is not None else "ended"
            # The record made here, not by `log.info`: that looks up the calling source
            # line on every call, and the daemon's format prints none.
            record = log.makeRecord(
                log.name,
                logging.INFO,
                __file__,
                0,
                "request %s %s %s: %s in %.0f ms",
                (request_id, model, kind, outcome, ms),
                None,
            )
            record.created = at
            record.msecs = (at - int(at)) * 1000
            record.batched = True
            log.handle(record)
        for each in _handlers(log):
            each.flush()
        return len(pending)


def _direct_handler(log: logging.Logger) -> BatchingStreamHandler | None:
    """The daemon's own handler, when an INFO record of `log` would reach it and nothing
    else, formatted by `DAEMON_FORMAT` with logging's default time format, with no filter
    on the way: then the lines can be written to it directly. None otherwise."""
    if log.disabled or log.filters or not log.isEnabledFor(logging.INFO):
        return None
    handlers = _handlers(log)
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    formatter = handler.formatter
    if (
        type(handler) is not BatchingStreamHandler
        or handler.filters
        or handler.level > logging.INFO
        or type(formatter) is not logging.Formatter
        or formatter._fmt != DAEMON_FORMAT
        or type(formatter._style) is not logging.PercentStyle
        or formatter.datefmt is not None
        or formatter.converter is not time.localtime
        or formatter.default_time_format != logging.Formatter.default_time_format
        or formatter.default_msec_format != logging.Formatter.default_msec_format
    ):
        return None
    return handler


def _write_lines(
    handler: BatchingStreamHandler, name: str, pending: list[tuple[float, str, str, str, str | bytes | None, float]]
) -> None:
    """What `logging.Formatter(DAEMON_FORMAT)` makes of each line's record, written in
    one go: `asctime` is the local time to the second, then `,` and the milliseconds cut
    (not rounded) to three digits, as `Formatter.formatTime` writes them."""
    lines = []
    end = handler.terminator
    second = -1
    stamp = ""
    for at, request_id, model, kind, outcome, ms in pending:
        if not isinstance(outcome, str):
            outcome = summary_in(outcome).outcome() if outcome is not None else "ended"
        whole = int(at)
        if whole != second:
            second = whole
            stamp = time.strftime(logging.Formatter.default_time_format, time.localtime(at))
        lines.append(
            f"{stamp},{int((at - whole) * 1000):03d} {name} INFO request {request_id} {model} {kind}: "
            f"{outcome} in {ms:.0f} ms{end}"
        )
    handler.acquire()
    try:
        handler.stream.write("".join(lines))
        handler.stream.flush()
    except RecursionError:
        raise
    except Exception:  # noqa: BLE001 - as `StreamHandler.emit`: lines that cannot be written are reported, never raised
        handler.handleError(logging.makeLogRecord({"msg": "request lines", "name": name}))
    finally:
        handler.release()


def _handlers(log: logging.Logger) -> list[logging.Handler]:
    """The handlers a record of `log` reaches (as `Logger.callHandlers` walks them)."""
    out: list[logging.Handler] = []
    current: logging.Logger | None = log
    while current is not None:
        out.extend(current.handlers)
        if not current.propagate:
            break
        current = current.parent
    return out


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The daemon's handler: standard error, through a buffer of its own. A record is
    written and flushed at once, as `StreamHandler` does; a request's line from a
    batch (`RequestLog.flush`) waits in the buffer for the batch's end, one `write`
    for all of them. (`sys.stderr` flushes at every newline, so it cannot be that
    buffer.)"""

    def __init__(self, fd: int | None = None) -> None:
        raw = io.FileIO(sys.stderr.fileno() if fd is None else fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            io.BufferedWriter(raw, 1 << 16), encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace"
        )
        super().__init__(stream)

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "batched", False):
            super().emit(record)
            return
        try:
            self.stream.write(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - as `StreamHandler.emit`: a record that cannot be written is reported, never raised
            self.handleError(record)


def daemon_log_handler() -> logging.Handler:
    """The daemon's handler: `BatchingStreamHandler` on standard error, or logging's own
    when standard error is no file (embedded, or closed)."""
    try:
        return BatchingStreamHandler()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return logging.StreamHandler()
