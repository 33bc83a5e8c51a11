"""The `trunkline` command: start the daemon, or talk to a running one.

Exit status: 0 success; 1 the request failed (the error class is printed);
2 bad usage or configuration; 3 no daemon is running; 130 interrupted (Ctrl-C
cancels the request first).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import trio

from .client import Client
from .errors import DaemonNotRunning, DaemonUnavailable, TrunklineError, error_from_info
from .protocol import __version__
from .protocol.messages import (
    BusEvent,
    ErrorEvent,
    Finish,
    Message,
    ReasoningDelta,
    Request,
    Response,
    TextDelta,
    ToolCallEnd,
)

EXIT_FAILED, EXIT_USAGE, EXIT_NO_DAEMON, EXIT_INTERRUPTED = 1, 2, 3, 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a tool SIGPIPE ended


def _runtime_dir(args: argparse.Namespace) -> Path | None:
    return Path(args.runtime_dir).expanduser() if args.runtime_dir else None


def _client(args: argparse.Namespace, watch_bus: bool = False) -> Client:
    """A client for the daemon the options name: the local one by default; a remote one
    with --control-endpoint (or TRUNKLINE_CONTROL), --token and --tls-ca-file, the same
    names the Python client's arguments and the C client use."""
    return Client(_runtime_dir(args), client_name="trunkline-cli", control_endpoint=args.control_endpoint,
                  token=args.token, tls_ca_file=args.tls_ca_file, tls_server_name=args.tls_server_name,
                  watch_bus=watch_bus)


def _json(obj: Any) -> str:
    return json.dumps(msgspec.to_builtins(obj), indent=2, ensure_ascii=False)


def summary(response: Response) -> str:
    u = response.usage
    parts = [f"{u.input_tokens} in", f"{u.output_tokens} out"]
    if u.cache_read_tokens or u.cache_write_tokens:
        parts.append(f"{u.cache_read_tokens} cache read, {u.cache_write_tokens} cache write")
    if u.reasoning_tokens:
        parts.append(f"{u.reasoning_tokens} reasoning")
    cost = f"${response.cost_usd:.6f}" if response.cost_usd is not None else "cost unknown"
    estimated = (f" (estimated: {', '.join(u.estimated_fields)})" if u.estimated_fields
                 else " (estimated)" if u.estimated else "")
    reason = response.finish_reason.reason
    return (f"[{response.provider}:{response.model}] {', '.join(parts)} tokens{estimated} · {cost} · "
            f"{response.latency_ms:.0f} ms · {reason}")


def _prompt(args: argparse.Namespace) -> str:
    """The prompt: the argument, standard input for `-`, or `--file` (with the argument
    first, when both are given, as an instruction about the file)."""
    text = sys.stdin.read() if args.prompt == "-" else (args.prompt or "")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                body = f.read()
        except OSError as exc:
            raise SystemExit(f"trunkline ask: cannot read --file {args.file}: {exc.strerror}") from None
        text = f"{text}\n\n{body}" if text else body
    if not text.strip():
        raise SystemExit("trunkline ask: the prompt is empty (give it as an argument, `-` for standard input, "
                         "or --file)")
    return text


async def _ask(args: argparse.Namespace) -> int:
    messages = ([Message.system(args.system)] if args.system else []) + [Message.user(_prompt(args))]
    fields: dict[str, Any] = {}
    if args.max_tokens is not None:
        fields["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        fields["temperature"] = args.temperature
    request = Request(model=args.model, messages=messages, **fields)
    out = sys.stdout
    async with _client(args) as client:
        if args.no_stream:
            response = await client.complete(request)
            if args.json:
                print(_json(response))
            else:
                print(response.text)
            print(summary(response), file=sys.stderr)
            return 0
        interrupted = False
        stream = client.stream(request)
        await stream.start()
        async with trio.open_nursery() as nursery:

            async def on_interrupt() -> None:
                nonlocal interrupted
                with trio.open_signal_receiver(signal.SIGINT) as signals:
                    async for _ in signals:
                        if interrupted:
                            raise SystemExit(EXIT_INTERRUPTED)  # a second Ctrl-C: stop waiting
                        interrupted = True
                        await stream.cancel()

            nursery.start_soon(on_interrupt)
            async for ev in stream:
                if args.json:
                    continue
                if isinstance(ev, TextDelta):
                    out.write(ev.text)
                    out.flush()
                elif isinstance(ev, ReasoningDelta) and args.reasoning:
                    sys.stderr.write(ev.text)
                    sys.stderr.flush()
                elif isinstance(ev, ToolCallEnd):
                    print(f"\n[tool call {ev.name}({json.dumps(ev.arguments)})]", file=sys.stderr)
                elif isinstance(ev, (Finish, ErrorEvent)):
                    break
            nursery.cancel_scope.cancel()
        acc = stream.accumulator
        if acc.error is not None:
            if not args.json:
                out.write("\n")
            raise error_from_info(acc.error, acc.partial)
        response = acc.response()
        if args.json:
            print(_json(response))
        else:
            out.write("\n")
        print(summary(response), file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else 0


async def _models(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        models = await client.list_models(args.provider)
    if args.json:
        print(_json(models))
        return 0
    rows = [("MODEL", "ALIASES", "CONTEXT", "MAX OUT", "$/M IN", "$/M OUT", "READY")]
    for m in models:
        rows.append((m.id, ",".join(m.aliases), str(m.context_window or "?"), str(m.max_output or "?"),
                     f"{m.price.input:g}" if m.price.input is not None else "?",
                     f"{m.price.output:g}" if m.price.output is not None else "?",
                     "yes" if m.configured else "no key"))
    _table(rows)
    return 0


async def _status(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        report = await client.status()
    if args.json:
        print(_json(report))
        return 0
    print(f"trunkline {report.server_version} · pid {report.pid} · up {report.uptime_s:.0f}s · "
          f"{report.in_flight} in flight")
    rows = [("PROVIDER", "TYPE", "STATE", "PID", "RESTARTS", "IN FLIGHT", "LAST ERROR")]
    for w in report.workers:
        state = f"{w.state} (unreachable)" if w.unreachable else w.state
        rows.append((w.provider, w.provider_type, state, str(w.pid or "-"), str(w.restarts), str(w.in_flight),
                     w.unreachable or w.last_error or ""))
    _table(rows)
    return 0


def bus_line(ev: BusEvent) -> str:
    """One bus event as one line: the time, the event's name, then what it says."""
    parts = [time.strftime("%H:%M:%S", time.localtime()), ev.name]
    if ev.request_id:
        parts.append(ev.request_id)
    for key in ("provider", "model", "attempt", "error_class", "retry_count", "wait_s", "latency_ms"):
        value = getattr(ev, key)
        if value is not None:
            parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    if ev.usage is not None:
        parts.append(f"tokens={ev.usage.input_tokens}/{ev.usage.output_tokens}")
    if ev.detail:
        parts.append(ev.detail)
    return " ".join(parts)


async def _tail(args: argparse.Namespace) -> int:
    """Print the daemon's bus as it happens (calls started, completed, failed, retried,
    rate-limited; workers up, exited, unavailable), until interrupted."""
    async with _client(args, watch_bus=True) as client:
        # Said once the subscription is live (the client's probe has come back): from here
        # on nothing the daemon publishes is missed.
        print(f"trunkline: watching the bus of {client.control_endpoint} (Ctrl-C to stop)", file=sys.stderr,
              flush=True)
        async for ev in client.bus_events:
            if args.name and not any(ev.name.startswith(prefix) for prefix in args.name):
                continue
            print(_json(ev).replace("\n", " ") if args.json else bus_line(ev), flush=True)
    return 0


async def _ready(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        result = await client.ready(args.model)
    if args.json:
        print(_json(result))
    elif result.ok:
        print(f"{result.model}: ready")
    else:
        assert result.error is not None
        print(f"{result.model or args.model}: not ready: {result.error.error_class}: {result.error.message}")
    return 0 if result.ok else EXIT_FAILED


async def _reload(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        result = await client.reload()
    if args.json:
        print(_json(result))
    elif result.ok:
        print(f"reloaded {result.config_path} · pricing {result.pricing_version or '?'}")
        for setting in result.restart_needed:
            print(f"  {setting}: changed; applies when the daemon restarts")
    else:
        assert result.error is not None
        print(f"trunkline: reload refused, nothing changed: {result.error.message}", file=sys.stderr)
    return 0 if result.ok else EXIT_FAILED


def _table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _serve(args: argparse.Namespace) -> int:
    from .supervisor.daemon import main_serve  # the daemon's code loads only for `serve`

    return main_serve(args.config, _runtime_dir(args))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trunkline", description="One daemon for every LLM provider.")
    p.add_argument("--version", action="version", version=f"trunkline {__version__}")

    def common(sp: argparse.ArgumentParser, top: bool = False) -> None:
        # Given before the command (`trunkline --runtime-dir X status`) or after it: a
        # subcommand's copy must not reset what the top level read.
        keep = {} if top else {"default": argparse.SUPPRESS}
        sp.add_argument("--runtime-dir", help="the daemon's runtime directory (default: $TRUNKLINE_RUNTIME_DIR, "
                        "else $XDG_RUNTIME_DIR/trunkline, else /tmp/trunkline-$UID)", **keep)
        sp.add_argument("--control-endpoint", help="a remote daemon's control endpoint, e.g. "
                        "tls+tcp://host:7800 (default: $TRUNKLINE_CONTROL, else the local daemon)", **keep)
        sp.add_argument("--token", help="the daemon's client token (default: $TRUNKLINE_TOKEN)", **keep)
        sp.add_argument("--tls-ca-file", help="the CA that signed the daemon's certificate, for tls+tcp:// "
                        "(default: $TRUNKLINE_TLS_CA_FILE)", **keep)
        sp.add_argument("--tls-server-name", help="the name the daemon's certificate must carry (default: the "
                        "endpoint's host)", **keep)

    common(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("serve", help="run the daemon in the foreground")
    sp.add_argument("--config", help="YAML file merged over the defaults (default: ~/.config/trunkline/config.yaml)")
    common(sp)

    sp = sub.add_parser("ask", help="ask a model; the answer streams to stdout")
    sp.add_argument("model", help="a catalog id such as mock:echo, an alias, or provider:name")
    sp.add_argument("prompt", nargs="?", help="the prompt; `-` reads it from standard input")
    sp.add_argument("--file", help="read the prompt from this file (after the prompt argument, if any)")
    sp.add_argument("--system", help="a system prompt")
    sp.add_argument("--no-stream", action="store_true", help="wait for the whole answer")
    sp.add_argument("--json", action="store_true", help="print the final response as JSON")
    sp.add_argument("--reasoning", action="store_true", help="show reasoning text on stderr")
    sp.add_argument("--max-tokens", type=int)
    sp.add_argument("--temperature", type=float)
    common(sp)

    sp = sub.add_parser("tail", help="print the daemon's bus (calls, retries, workers) as it happens")
    sp.add_argument("--name", action="append", help="only events whose name starts with this (repeatable), "
                    "e.g. llm.call_failed or worker.")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    common(sp)

    sp = sub.add_parser("models", help="list the model catalog")
    sp.add_argument("--provider")
    sp.add_argument("--json", action="store_true")
    common(sp)

    sp = sub.add_parser("status", help="show the daemon and its workers")
    sp.add_argument("--json", action="store_true")
    common(sp)

    sp = sub.add_parser("reload", help="re-read the daemon's config file and the catalog (as SIGHUP does)")
    sp.add_argument("--json", action="store_true")
    common(sp)

    sp = sub.add_parser("ready", help="check that a model can be called now")
    sp.add_argument("model")
    sp.add_argument("--json", action="store_true")
    common(sp)
    return p


COMMANDS = {"ask": _ask, "models": _models, "status": _status, "ready": _ready, "reload": _reload, "tail": _tail}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    try:
        status: int = trio.run(COMMANDS[args.command], args)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is handled below
        return status
    except BaseException as exc:  # noqa: BLE001 - every ending gets its exit status
        return _exit_status(exc)


def _exit_status(exc: BaseException) -> int:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # a task group wrapped the one failure
    if isinstance(exc, (DaemonNotRunning, DaemonUnavailable)):
        print(f"trunkline: {exc}", file=sys.stderr)
        return EXIT_NO_DAEMON
    if isinstance(exc, TrunklineError):
        print(f"trunkline: {exc.info.error_class}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        # Our reader went away (`trunkline status | head -1`): stop quietly, as Unix tools
        # do, and point stdout at nothing so the interpreter's final flush fails no more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    if isinstance(exc, SystemExit):
        return int(exc.code or 0)
    raise exc


if __name__ == "__main__":
    sys.exit(main())
