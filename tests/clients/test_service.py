"""`trunkline service install|uninstall`: a systemd user unit (a launchd agent on
macOS) that runs the daemon always on, written under a temporary HOME, checked by
systemd's own verifier and plistlib, and its command run for real."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from helpers import FAST_CONFIG, deep_merge, short_tmpdir
from trunkline import Client

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


class UserHome:
    """HOME and XDG_CONFIG_HOME in a temporary directory, and a PATH whose systemctl and
    launchctl only record how they were called."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_home = root / "config home"  # a space: the unit must quote paths
        self.calls = root / "calls"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for tool in ("systemctl", "launchctl"):
            fake = bin_dir / tool
            fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{self.calls}"\n')
            fake.chmod(0o755)
        self.env = {
            **os.environ,
            "HOME": str(root),
            "XDG_CONFIG_HOME": str(self.config_home),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        }

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trunkline.cli", "service", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    @property
    def unit(self) -> Path:
        return self.config_home / "systemd" / "user" / "trunkline.service"

    @property
    def agent(self) -> Path:
        return self.root / "Library" / "LaunchAgents" / "io.trunkline.daemon.plist"


@pytest.fixture
def user(tmp_path: Path) -> UserHome:
    return UserHome(tmp_path)


def _exec_start(unit: str) -> list[str]:
    [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_install_writes_a_systemd_user_unit_and_runs_nothing(user):
    config = user.root / "my config.yaml"
    config.write_text("log_level: info\n")
    done = user.run("install", "--kind", "systemd", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {user.unit}"
    unit = user.unit.read_text()
    assert _exec_start(unit) == [sys.executable, "-m", "trunkline.cli", "serve", "--config", str(config)]
    assert f"EnvironmentFile=-{user.config_home}/trunkline/environment" in unit
    assert "systemctl --user daemon-reload && systemctl --user enable --now trunkline.service" in done.stderr
    assert user.called() == []


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed on this machine")
def test_the_unit_passes_systemd_analyze_verify(user, tmp_path):
    config = user.root / "my config.yaml"
    config.write_text("log_level: info\n")
    assert user.run("install", "--kind", "systemd", "--config", str(config)).returncode == 0
    runtime = tmp_path / "xdg-run"
    runtime.mkdir(mode=0o700)
    assert SYSTEMD_ANALYZE is not None
    verified = subprocess.run(
        [SYSTEMD_ANALYZE, "--user", "verify", str(user.unit)],
        env={**user.env, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stderr
    # Warnings about the unit (a misspelt key, a bad value) are not failures: none either.
    assert "trunkline.service" not in verified.stderr, verified.stderr


def test_print_shows_the_unit_without_writing_it(user):
    done = user.run("install", "--kind", "systemd", "--print")
    assert done.returncode == 0, done.stderr
    assert not user.unit.exists()
    assert user.run("install", "--kind", "systemd").returncode == 0
    assert done.stdout == user.unit.read_text()


def test_now_runs_systemctl_and_uninstall_removes_the_unit(user):
    assert user.run("install", "--kind", "systemd", "--now").returncode == 0
    assert user.called() == ["systemctl --user daemon-reload", "systemctl --user enable --now trunkline.service"]
    done = user.run("uninstall", "--kind", "systemd", "--now")
    assert done.returncode == 0, done.stderr
    assert not user.unit.exists()
    assert user.called()[-1] == "systemctl --user disable --now trunkline.service"
    again = user.run("uninstall", "--kind", "systemd")
    assert again.returncode == 0 and "nothing to remove" in again.stderr


def test_install_writes_a_launchd_agent_that_round_trips_through_plistlib(user):
    done = user.run("install", "--kind", "launchd", "--runtime-dir", "/tmp/tl-agent")
    assert done.returncode == 0, done.stderr
    data = user.agent.read_bytes()
    agent: dict[str, Any] = plistlib.loads(data)
    assert plistlib.dumps(agent) == data
    assert agent["Label"] == "io.trunkline.daemon"
    assert agent["ProgramArguments"] == [
        sys.executable,
        "-m",
        "trunkline.cli",
        "serve",
        "--runtime-dir",
        "/tmp/tl-agent",
    ]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["StandardErrorPath"] == str(user.root / "Library" / "Logs" / "trunkline.log")
    assert f"launchctl bootstrap gui/{os.getuid()} {user.agent}" in done.stderr
    assert user.called() == []
    assert user.run("uninstall", "--kind", "launchd").returncode == 0
    assert not user.agent.exists()


async def test_the_service_command_serves_clients(user):
    """What the service manager would run is a daemon clients reach."""
    work = short_tmpdir()
    try:
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump(deep_merge(FAST_CONFIG, {"state_dir": str(work / "state")})))
        done = user.run("install", "--kind", "systemd", "--config", str(config), "--runtime-dir", str(work / "run"))
        assert done.returncode == 0, done.stderr
        command = _exec_start(user.unit.read_text())
        process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with trio.fail_after(60):
                while not (work / "run" / "control.ipc").exists():
                    await trio.sleep(0.05)
                async with Client(work / "run") as client:
                    assert (await client.complete("mock:echo", "always on")).text == "always on"
                process.send_signal(signal.SIGTERM)
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
    finally:
        shutil.rmtree(work, ignore_errors=True)
