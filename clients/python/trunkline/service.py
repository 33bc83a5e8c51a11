"""`trunkline service install`: the daemon always on, run by the user's service manager
(a systemd user unit on Linux, a launchd agent on macOS) rather than started by the
first client (`autostart`). Writing the file is all it does unless asked (`--now`):
the commands that load it are printed, so nothing changes behind the user's back.
"""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["systemd", "launchd"]

UNIT_NAME = "trunkline.service"
LAUNCHD_LABEL = "io.trunkline.daemon"
#: A SIGTERM drains the requests in flight (supervision.shutdown_grace_s, 10 s by
#: default): the service manager waits this long before it kills what is left.
STOP_TIMEOUT_S = 60


def default_kind() -> Kind:
    return "launchd" if sys.platform == "darwin" else "systemd"


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def unit_path(kind: Kind) -> Path:
    """Where the service manager looks for the user's own services."""
    if kind == "systemd":
        return _config_home() / "systemd" / "user" / UNIT_NAME
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def environment_file() -> Path:
    """Where the systemd unit reads the providers' keys (`NAME=value` lines): a user
    service does not see the variables of the user's shell."""
    return _config_home() / "trunkline" / "environment"


def serve_command(config: str | None, runtime_dir: str | None) -> list[str]:
    """`trunkline serve` with this interpreter (the one trunkline is installed in), with
    absolute paths: a service does not start in the user's directory."""
    cmd = [sys.executable, "-m", "trunkline.cli", "serve"]
    if config:
        cmd += ["--config", str(Path(config).expanduser().absolute())]
    if runtime_dir:
        cmd += ["--runtime-dir", str(Path(runtime_dir).expanduser().absolute())]
    return cmd


def _systemd_word(arg: str) -> str:
    """One argument of an Exec line: `%` and `$` would be expanded by systemd, and a
    space or quote splits the line, so they are escaped and the word quoted."""
    word = arg.replace("%", "%%").replace("$", "$$")
    if any(c in word for c in " \t\"'\\;"):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def systemd_unit(command: list[str]) -> str:
    env_file = str(environment_file()).replace("%", "%%")
    return f"""# Written by `trunkline service install`; `trunkline service uninstall` removes it.
[Unit]
Description=trunkline: one daemon for every LLM provider
Documentation=https://github.com/trunkline/trunkline

[Service]
Type=exec
ExecStart={" ".join(_systemd_word(a) for a in command)}
# `systemctl --user reload trunkline` re-reads the config file and the catalog.
ExecReload=/bin/kill -HUP $MAINPID
# The providers' keys, one NAME=value a line (keep it chmod 600); it may be absent.
EnvironmentFile=-{env_file}
# SIGTERM to the daemon alone: it drains its requests, then stops its workers itself.
KillMode=mixed
TimeoutStopSec={STOP_TIMEOUT_S}
Restart=on-failure
RestartSec=2

[Install]
WantedBy=default.target
"""


def launchd_plist(command: list[str]) -> bytes:
    log = Path.home() / "Library" / "Logs" / "trunkline.log"
    agent = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": command,
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restarted after a crash, not after a stop
        "ProcessType": "Background",
        "ExitTimeOut": STOP_TIMEOUT_S,
        "StandardOutPath": str(log),
        "StandardErrorPath": str(log),
    }
    return plistlib.dumps(agent)


@dataclass(frozen=True, slots=True)
class ServiceFile:
    kind: Kind
    path: Path
    content: bytes

    def load_commands(self) -> list[list[str]]:
        """What makes the service manager run it now and at each login."""
        if self.kind == "systemd":
            return [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
        return [["launchctl", "bootstrap", f"gui/{os.getuid()}", str(self.path)]]

    def unload_commands(self) -> list[list[str]]:
        if self.kind == "systemd":
            return [["systemctl", "--user", "disable", "--now", UNIT_NAME]]
        return [["launchctl", "bootout", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"]]


def service_file(kind: Kind, config: str | None, runtime_dir: str | None) -> ServiceFile:
    command = serve_command(config, runtime_dir)
    content = systemd_unit(command).encode() if kind == "systemd" else launchd_plist(command)
    return ServiceFile(kind, unit_path(kind), content)


def write(service: ServiceFile) -> None:
    """The file, whole or not at all (a service manager may read it at any moment)."""
    service.path.parent.mkdir(parents=True, exist_ok=True)
    partial = service.path.with_name(service.path.name + ".partial")
    partial.write_bytes(service.content)
    partial.replace(service.path)


def run(commands: list[list[str]]) -> int:
    """Run the service manager's commands in order, each shown first; the first that
    fails stops the rest. Returns its exit status (0: all ran)."""
    for cmd in commands:
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        try:
            status = subprocess.run(cmd, check=False).returncode
        except OSError as exc:
            print(f"trunkline service: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr)
            return 1
        if status:
            return status
    return 0


def shown(commands: list[list[str]]) -> str:
    return " && ".join(" ".join(cmd) for cmd in commands)


__all__ = ["ServiceFile", "default_kind", "environment_file", "service_file", "unit_path", "write"]
