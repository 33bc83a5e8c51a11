"""The `trunkline` command: start the daemon, or talk to a running one.

Exit status: 0 success; 1 the request failed (the error class is printed);
2 bad usage (a prompt that cannot be read, an option the command does not
take) or configuration; 3 no daemon is running, or it went away; 4 a TLS
endpoint that cannot be trusted (CA, server name, handshake); 130 interrupted
(Ctrl-C cancels the request first); 141 the reader of the output went away.
With --json a failure is printed on stdout as JSON too (`{"error": {...}}`).
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
from typing import TYPE_CHECKING, Any

import msgspec

from .config.loader import CONFIG_ENV, ConfigError, endpoint_problem
from .config.names import did_you_mean
from .errors import DaemonNotRunning, DaemonUnavailable, TLSError, TrunklineError, error_from_info
from .protocol import __version__
from .protocol.messages import (
    ApiKeyStatus,
    BusEvent,
    ErrorEvent,
    ErrorInfo,
    Finish,
    Message,
    ReasoningDelta,
    Request,
    Response,
    StatusReport,
    TextDelta,
    ToolCallEnd,
)

if TYPE_CHECKING:
    # The client's and the service files' code load with the commands that use them:
    # `serve` is the supervisor, which would keep 3.7 MiB of it it never runs.
    from .client import Client
    from .service import Kind

EXIT_FAILED, EXIT_USAGE, EXIT_NO_DAEMON, EXIT_TLS, EXIT_INTERRUPTED = 1, 2, 3, 4, 130
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a tool SIGPIPE ended
#: `tail` asks the daemon how it is this often, and calls it gone after this long without an answer.
TAIL_CHECK_S, TAIL_PATIENCE_S = 1.0, 3.0


class UsageError(Exception):
    """A command that cannot run as given (exit status 2)."""


def _runtime_dir(args: argparse.Namespace) -> Path | None:
    return Path(args.runtime_dir).expanduser() if args.runtime_dir else None


def _client(args: argparse.Namespace, watch_bus: bool = False) -> Client:
    """A client for the daemon the options name: the local one by default; a remote one
    with --control-endpoint (or TRUNKLINE_CONTROL), --token and --tls-ca-file, the same
    names the Python client's arguments and the C client use."""
    from .client import Client

    return Client(
        _runtime_dir(args),
        client_name="trunkline-cli",
        control_endpoint=args.control_endpoint,
        token=args.token,
        tls_ca_file=args.tls_ca_file,
        tls_server_name=args.tls_server_name,
        watch_bus=watch_bus,
    )


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
    estimated = (
        f" (estimated: {', '.join(u.estimated_fields)})"
        if u.estimated_fields
        else " (estimated)"
        if u.estimated
        else ""
    )
    reason = response.finish_reason.reason
    return (
        f"[{response.provider}:{response.model}] {', '.join(parts)} tokens{estimated} · {cost} · "
        f"{response.latency_ms:.0f} ms · {reason}"
    )


def _text(data: bytes, what: str) -> str:
    """Bytes that must be a prompt: UTF-8 text without NUL bytes."""
    if b"\0" in data:
        raise UsageError(
            f"{what} is not text (it holds NUL bytes); images and documents go as file parts from the Python client"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _prompt(args: argparse.Namespace) -> str:
    """The prompt: the argument, standard input for `-`, or `--file` (with the argument
    first, when both are given, as an instruction about the file)."""
    text = _text(sys.stdin.buffer.read(), "standard input") if args.prompt == "-" else (args.prompt or "")
    if args.file:
        try:
            with open(args.file, "rb") as f:
                body = _text(f.read(), f"--file {args.file}")
        except IsADirectoryError:
            raise UsageError(f"--file {args.file} is a directory, not a file") from None
        except OSError as exc:
            raise UsageError(f"cannot read --file {args.file}: {exc.strerror}") from None
        if not body.strip():
            raise UsageError(f"--file {args.file} is empty")
        text = f"{text}\n\n{body}" if text else body
    if not text.strip():
        raise UsageError("the prompt is empty (give it as an argument, `-` for standard input, or --file)")
    return text


class _Lines:
    """One output stream that remembers whether its last line is unfinished, so what
    follows starts on a line of its own without leaving a blank one."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.open = False

    def write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()
            self.open = not text.endswith("\n")

    def end_line(self) -> None:
        if self.open:
            self.write("\n")


async def _ask(args: argparse.Namespace) -> int:
    import trio

    messages = ([Message.system(args.system)] if args.system else []) + [Message.user(_prompt(args))]
    fields: dict[str, Any] = {}
    if args.max_tokens is not None:
        fields["max_tokens"] = args.max_tokens
    if args.temperature is not None:
        fields["temperature"] = args.temperature
    request = Request(model=args.model, messages=messages, **fields)
    out, err = _Lines(sys.stdout), _Lines(sys.stderr)
    async with _client(args) as client:
        if args.no_stream:
            response = await client.complete(request)
            if args.json:
                print(_json(response))
            else:
                out.write(response.text)
                out.end_line()
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
                elif isinstance(ev, ReasoningDelta) and args.reasoning:
                    err.write(ev.text)
                elif isinstance(ev, ToolCallEnd):
                    err.write(f"\n[tool call {ev.name}({json.dumps(ev.arguments)})]\n")
                elif isinstance(ev, (Finish, ErrorEvent)):
                    break
            nursery.cancel_scope.cancel()
        # The answer's last line ends here; a blank line only if the answer has one.
        out.end_line()
        err.end_line()
        acc = stream.accumulator
        if acc.error is not None:
            raise error_from_info(acc.error, acc.partial, stream.request_id)
        response = acc.response()
        if args.json:
            print(_json(response))
        print(summary(response), file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else 0


async def _models(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        models = await client.list_models(args.provider)
        providers = client.welcome.providers if client.welcome is not None else []
    if args.provider is not None and not models:
        if args.provider not in providers:
            raise error_from_info(
                ErrorInfo(
                    error_class="not_found",
                    message=(
                        f"no provider {args.provider!r} on this daemon{did_you_mean(args.provider, providers)} "
                        f"(its providers: {', '.join(providers) or 'none'})"
                    ),
                )
            )
        print(
            f"trunkline: the catalog lists no models of {args.provider}; any model name passes through to it "
            f"as `{args.provider}:NAME`",
            file=sys.stderr,
        )
    if args.json:
        print(_json(models))
        return 0
    rows = [("MODEL", "ALIASES", "CONTEXT", "MAX OUT", "$/M IN", "$/M OUT", "READY")]
    for m in models:
        rows.append(
            (
                m.id,
                ",".join(m.aliases),
                str(m.context_window or "?"),
                str(m.max_output or "?"),
                f"{m.price.input:g}" if m.price.input is not None else "?",
                f"{m.price.output:g}" if m.price.output is not None else "?",
                "yes" if m.configured else "no key",
            )
        )
    _table(rows)
    return 0


async def _status(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        report = await client.status()
    if args.json:
        print(_json(report))
        return 0
    print(
        f"trunkline {report.server_version} · pid {report.pid} · up {report.uptime_s:.0f}s · "
        f"{report.in_flight} in flight"
    )
    shared = report.shared_state
    if shared is not None:
        health = (
            f"DEGRADED since {time.strftime('%H:%M:%S', time.localtime(shared.since or 0))} ({shared.reason}); "
            f"{shared.local_decisions} decided locally, {shared.pending_settlements} settlements waiting"
            if shared.degraded
            else "up"
        )
        print(f"shared state: {shared.kind} {shared.url} · {health} · {shared.daemons} daemon(s)")
    rows = [("PROVIDER", "TYPE", "STATE", "PID", "RESTARTS", "IN FLIGHT", "LAST ERROR")]
    for w in report.workers:
        state = f"{w.state} (unreachable)" if w.unreachable else w.state
        rows.append(
            (
                w.provider,
                w.provider_type,
                state,
                str(w.pid or "-"),
                str(w.restarts),
                str(w.in_flight),
                w.unreachable or w.last_error or "",
            )
        )
    _table(rows)
    for w in report.workers:
        if w.api_keys:
            print(f"{w.provider}: {len(w.api_keys)} keys: " + "; ".join(_key_use(k) for k in w.api_keys))
    if report.keys:
        print()
        _table(_key_rows(report))
    return 0


def _key_use(key: ApiKeyStatus) -> str:
    """One of a provider's keys in `status`: its variable, its requests, and why it rests."""
    if not key.set:
        return f"{key.variable} not set"
    resting = f", resting {key.cooling_s:.0f}s after {key.last_error}" if key.cooling_s is not None else ""
    return f"{key.variable} {key.requests} requests{resting}"


def _key_rows(report: StatusReport) -> list[tuple[str, ...]]:
    """Each client key's and limited deployment's use against its limits (`-`: none)."""

    def of(used: float, limit: float | None, fmt: str = "{:g}") -> str:
        return fmt.format(used) + ("" if limit is None else "/" + fmt.format(limit))

    rows: list[tuple[str, ...]] = [("KEY", "REQ/MIN", "TOKENS/MIN", "RUNNING", "USD TODAY", "USD MONTH", "NOTE")]
    for k in report.keys:
        note = ""
        if k.cooldown_until is not None:
            note = f"cooling down {max(k.cooldown_until - time.time(), 0):.0f}s"
        rows.append(
            (
                k.name if k.scope == "key" else f"deployment {k.name}",
                of(k.requests_last_minute, k.rpm),
                of(k.tokens_last_minute, k.tpm),
                of(k.in_flight, k.parallel),
                of(k.usd_today, k.usd_per_day, "{:.4f}"),
                of(k.usd_this_month, k.usd_per_month, "{:.4f}"),
                note,
            )
        )
    return rows


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
    import trio

    async with _client(args, watch_bus=True) as client:
        # Said once the subscription is live (the client's probe has come back): from here
        # on nothing the daemon publishes is missed.
        print(f"trunkline: watching the bus of {client.control_endpoint} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_gone, client)
            async for ev in client.bus_events:
                if args.name and not any(ev.name.startswith(prefix) for prefix in args.name):
                    continue
                print(_json(ev).replace("\n", " ") if args.json else bus_line(ev), flush=True)
    return 0


async def _until_gone(client: Client) -> None:
    """Raise DaemonUnavailable once the daemon stops answering: a silent bus alone
    cannot tell a quiet daemon from a dead one. (One restarted meanwhile answers
    again, and its bus reaches the same subscription.)"""
    import trio

    while True:
        await trio.sleep(TAIL_CHECK_S)
        try:
            with trio.fail_after(TAIL_PATIENCE_S):
                await client.status()
        except (trio.TooSlowError, DaemonUnavailable, OSError):
            raise DaemonUnavailable(
                f"the daemon at {client.control_endpoint} went away (no answer for "
                f"{TAIL_PATIENCE_S:g} s); stopped watching its bus"
            ) from None


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
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _serve(args: argparse.Namespace) -> int:
    try:
        overrides = _serve_overrides(args)
    except UsageError as exc:
        print(f"trunkline serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    config = args.config or os.environ.get(CONFIG_ENV) or None
    # The fork server starts first, so that it imports the workers' code while this
    # process imports the supervisor's (a config with a mistake is main_serve's to report).
    from .config.loader import load_config
    from .supervisor.launch import start_early

    try:
        early = start_early(load_config(config, overrides=overrides))
    except ConfigError:
        early = None
    from .supervisor.daemon import main_serve  # the daemon's code loads only for `serve`

    return main_serve(config, _runtime_dir(args), overrides, exit_when_idle=args.exit_when_idle, fork_server=early)


def _service(args: argparse.Namespace) -> int:
    """`service install` writes the unit (or agent), `--print` only shows it, `service
    uninstall` removes it; the service manager is run only with `--now`."""
    from .service import ServiceFile, default_kind, environment_file, service_file, shown, unit_path, write
    from .service import run as run_service_commands

    kind: Kind = args.kind or default_kind()
    if args.action == "uninstall":
        path = unit_path(kind)
        unload = ServiceFile(kind, path, b"").unload_commands()
        if args.now:
            status = run_service_commands(unload)
            if status:
                return status
        elif path.exists():
            print(f"stop it first if it runs: {shown(unload)}", file=sys.stderr)
        if not path.exists():
            print(f"trunkline service: nothing to remove ({path} does not exist)", file=sys.stderr)
            return 0
        path.unlink()
        print(f"removed {path}")
        return 0
    service = service_file(kind, args.config, _service_runtime_dir(args))
    if args.print:
        sys.stdout.write(service.content.decode())
        return 0
    write(service)
    print(f"wrote {service.path}")
    if kind == "systemd":
        print(f"the providers' keys go in {environment_file()} (NAME=value lines, chmod 600)", file=sys.stderr)
    else:
        print("the providers' keys: `launchctl setenv NAME value` (an agent sees no shell variables)", file=sys.stderr)
    load = service.load_commands()
    if args.now:
        return run_service_commands(load)
    print(f"start it now and at each login: {shown(load)}", file=sys.stderr)
    return 0


def _service_runtime_dir(args: argparse.Namespace) -> str | None:
    return str(args.runtime_dir) if args.runtime_dir else None


def _serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """What `serve`'s options change in the config file's settings; the token goes to the
    daemon's environment, where it reads TRUNKLINE_TOKEN."""
    for flag, value in (("--tls-ca-file", args.tls_ca_file), ("--tls-server-name", args.tls_server_name)):
        if value:
            raise UsageError(
                f"{flag} is a client's option (the daemon a client trusts); the daemon's own TLS is "
                "its certificate and key: --tls-cert-file and --tls-key-file (or endpoints.tls_cert_file "
                "and endpoints.tls_key_file in its config)"
            )
    endpoints: dict[str, str] = {}
    for key, flag, value in (
        ("control", "--control-endpoint", args.control_endpoint),
        ("events", "--events-endpoint", args.events_endpoint),
    ):
        if value is not None:
            problem = endpoint_problem(value)
            if problem:
                raise UsageError(f"{flag}: {problem}")
            endpoints[key] = value
    for key, value in (("tls_cert_file", args.tls_cert_file), ("tls_key_file", args.tls_key_file)):
        if value is not None:
            endpoints[key] = value
    if args.token is not None:
        if not args.token.strip():
            raise UsageError("--token is empty")
        os.environ["TRUNKLINE_TOKEN"] = args.token
    return {"endpoints": endpoints} if endpoints else {}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trunkline", description="One daemon for every LLM provider.")
    p.add_argument("--version", action="version", version=f"trunkline {__version__}")

    def common(sp: argparse.ArgumentParser, top: bool = False) -> None:
        # Given before the command (`trunkline --runtime-dir X status`) or after it: a
        # subcommand's copy must not reset what the top level read.
        keep: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
        sp.add_argument(
            "--runtime-dir",
            help="the daemon's runtime directory (default: $TRUNKLINE_RUNTIME_DIR, "
            "else $XDG_RUNTIME_DIR/trunkline, else /tmp/trunkline-$UID)",
            **keep,
        )
        sp.add_argument(
            "--control-endpoint",
            help="a remote daemon's control endpoint, e.g. "
            "tls+tcp://host:7800 (default: $TRUNKLINE_CONTROL, else the local daemon)",
            **keep,
        )
        sp.add_argument("--token", help="the daemon's client token (default: $TRUNKLINE_TOKEN)", **keep)
        sp.add_argument(
            "--tls-ca-file",
            help="the CA that signed the daemon's certificate, for tls+tcp:// (default: $TRUNKLINE_TLS_CA_FILE)",
            **keep,
        )
        sp.add_argument(
            "--tls-server-name",
            help="the name the daemon's certificate must carry (default: "
            "$TRUNKLINE_TLS_SERVER_NAME, else the endpoint's host)",
            **keep,
        )

    common(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("serve", help="run the daemon in the foreground")
    sp.add_argument(
        "--config",
        help="YAML file merged over the defaults (default: $TRUNKLINE_CONFIG, else ~/.config/trunkline/config.yaml)",
    )
    # The daemon's own side of the settings clients name: where it listens, the token it
    # asks for, its certificate. Each wins over the config file, a reload included.
    sp.add_argument(
        "--runtime-dir",
        help="where the sockets live (default: the config's runtime_dir, else "
        "$TRUNKLINE_RUNTIME_DIR, $XDG_RUNTIME_DIR/trunkline or /tmp/trunkline-$UID)",
        default=argparse.SUPPRESS,
    )
    sp.add_argument(
        "--control-endpoint",
        help="listen for control requests here (endpoints.control), e.g. tls+tcp://0.0.0.0:7300",
        default=argparse.SUPPRESS,
    )
    sp.add_argument("--events-endpoint", help="publish events here (endpoints.events), e.g. tls+tcp://0.0.0.0:7301")
    sp.add_argument(
        "--token",
        help="the token clients of a network endpoint must give (default: $TRUNKLINE_TOKEN, "
        "which other users cannot read in `ps` as they can a command line)",
        default=argparse.SUPPRESS,
    )
    sp.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit once no client has been connected for autostart.idle_exit_s (how clients start it)",
    )
    sp.add_argument("--tls-cert-file", help="the daemon's certificate chain, PEM (endpoints.tls_cert_file)")
    sp.add_argument("--tls-key-file", help="the certificate's private key, PEM (endpoints.tls_key_file)")
    for client_only in ("--tls-ca-file", "--tls-server-name"):  # read only to say why they do not apply
        sp.add_argument(client_only, help=argparse.SUPPRESS, default=argparse.SUPPRESS)

    sp = sub.add_parser("service", help="run the daemon as a systemd user service (a launchd agent on macOS)")
    sp.add_argument("action", choices=("install", "uninstall"))
    sp.add_argument("--kind", choices=("systemd", "launchd"), help="default: launchd on macOS, else systemd")
    sp.add_argument("--config", help="the config file the service runs (default: serve's)")
    sp.add_argument("--runtime-dir", help="where its sockets live (default: serve's)", default=argparse.SUPPRESS)
    sp.add_argument("--print", action="store_true", help="show the file instead of writing it")
    sp.add_argument(
        "--now",
        action="store_true",
        help="also run systemctl --user (launchctl) to start it now and at each login, or stop it",
    )

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
    sp.add_argument(
        "--name",
        action="append",
        help="only events whose name starts with this (repeatable), e.g. llm.call_failed or worker.",
    )
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    common(sp)

    sp = sub.add_parser("models", help="list the model catalog")
    sp.add_argument("--provider", help="only this provider's models")
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
    if args.command == "service":
        return _service(args)
    import trio  # not before `serve`, whose fork server starts while the daemon imports it

    try:
        status: int = trio.run(COMMANDS[args.command], args)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is handled below
        return status
    except BaseException as exc:  # noqa: BLE001 - every ending gets its exit status
        try:
            return _exit_status(exc, args)
        except BrokenPipeError:
            return _exit_status(BrokenPipeError(), args)


def _exit_status(exc: BaseException, args: argparse.Namespace) -> int:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # a task group wrapped the one failure
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        # Our reader went away (`trunkline status | head -1`): stop quietly, as Unix tools
        # do, and point stdout at nothing so the interpreter's final flush fails no more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    if isinstance(exc, SystemExit) and not isinstance(exc.code, str):
        return int(exc.code or 0)
    failure = _failure(exc, args.command)
    if failure is None:
        raise exc
    status, line, info = failure
    print(line, file=sys.stderr)
    if getattr(args, "json", False):
        # The protocol's ErrorInfo with every field, as an error event carries it.
        body: dict[str, Any] = {"error": {name: getattr(info, name) for name in info.__struct_fields__}}
        if isinstance(exc, TrunklineError):
            if exc.partial is not None:
                body["partial"] = exc.partial
            if exc.request_id:
                body["request_id"] = exc.request_id
        print(_json(body), flush=True)
    return status


def _failure(exc: BaseException, command: str) -> tuple[int, str, ErrorInfo] | None:
    """How a failure ends the command: its exit status, its line on stderr, and the
    error as the protocol classifies it (for --json)."""
    if isinstance(exc, TLSError):
        return EXIT_TLS, f"trunkline: {exc}", ErrorInfo(error_class="unavailable", message=str(exc))
    if isinstance(exc, (DaemonNotRunning, DaemonUnavailable)):
        return (
            EXIT_NO_DAEMON,
            f"trunkline: {exc}",
            ErrorInfo(error_class="unavailable", message=str(exc), retryable=True),
        )
    if isinstance(exc, TrunklineError):
        return EXIT_FAILED, f"trunkline: {exc.info.error_class}: {exc.message}", exc.info
    if isinstance(exc, ConfigError):  # the config an autostarting client reads
        return EXIT_USAGE, f"trunkline: {exc}", ErrorInfo(error_class="invalid_request", message=str(exc))
    if isinstance(exc, (UsageError, SystemExit)):
        message = str(exc if isinstance(exc, UsageError) else exc.code)
        return EXIT_USAGE, f"trunkline {command}: {message}", ErrorInfo(error_class="invalid_request", message=message)
    return None


if __name__ == "__main__":
    sys.exit(main())
