"""The peers, each in its own processes, against the same upstream: the LiteLLM SDK and
proxy from bench/.venv, and the Portkey gateway with node from bench/portkey.

A peer that cannot run (no bench/.venv, LiteLLM missing, the proxy not starting
offline) is skipped, and the reason goes into the report; the rest of the
benchmark never depends on a peer.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import trio

from .procs import LineProcess, rss_mb, tree

BENCH_DIR = Path(__file__).resolve().parent
BENCH_VENV = BENCH_DIR / ".venv"
PROXY_KEY = "sk-bench"


class PeerUnavailable(Exception):
    """Why a peer is skipped, in a sentence for the report."""


def peer_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_OFFLINE_MODE="true",
        LITELLM_MASTER_KEY=PROXY_KEY,
        LITELLM_TELEMETRY="False",
        PYTHONUNBUFFERED="1",
    )
    env.pop("DATABASE_URL", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def bench_python() -> Path:
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        raise PeerUnavailable(
            "bench/.venv does not exist (`make bench` creates it from bench/requirements.txt; "
            "it needs the package index)"
        )
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        env=peer_env(),
    )
    if probe.returncode != 0:
        raise PeerUnavailable(f"LiteLLM is not installed in bench/.venv ({probe.stderr.strip()[-200:]})")
    return python


async def start_sdk(log: Path) -> tuple[LineProcess, dict]:
    python = bench_python()
    proc = LineProcess([str(python), str(BENCH_DIR / "litellm_sdk_driver.py")], env=peer_env(), log=log)
    await proc.start()
    try:
        hello = await proc.call({"op": "hello"}, timeout_s=120)
    except Exception as exc:  # noqa: BLE001 - whatever stops the driver, the peer is unavailable and says why
        await proc.stop()
        raise PeerUnavailable(f"the LiteLLM SDK driver did not start: {exc}") from None
    return proc, hello


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def answers(proc: trio.Process, url: str, timeout_s: float, any_status: bool = False) -> bool:
    """Whether the peer `proc` starts answering `url` (with a 200, or with anything when
    `any_status`) within `timeout_s`, while it runs."""
    async with httpx.AsyncClient() as client:
        with trio.move_on_after(timeout_s):
            while proc.returncode is None:
                try:
                    reply = await client.get(url, timeout=2)
                    if any_status or reply.status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                await trio.sleep(0.25)
    return False


@dataclass
class Proxy:
    proc: trio.Process
    port: int
    version: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def pids(self) -> list[int]:
        return tree(self.proc.pid)

    def rss(self) -> float:
        return sum(rss_mb(p) for p in self.pids())

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            with trio.move_on_after(15):
                await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()


async def start_proxy(upstream_port: int, workdir: Path, log: Path, timeout_s: float = 90.0) -> Proxy:
    python = bench_python()
    litellm_cli = python.parent / "litellm"
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        env=peer_env(),
    ).stdout.strip()
    config = workdir / "litellm-proxy.yaml"
    # One wildcard route: every model name reaches the fake upstream unchanged, so the
    # same shape tokens (`bench-c50-d0`) work through the proxy as elsewhere.
    config.write_text(
        "model_list:\n"
        '  - model_name: "*"\n'
        "    litellm_params:\n"
        '      model: "openai/*"\n'
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: x\n"
    )
    port = free_port()
    with open(log, "ab") as out:
        proc = await trio.lowlevel.open_process(
            [
                str(litellm_cli),
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=peer_env(),
            cwd=str(workdir),
        )
    proxy = Proxy(proc, port, version)
    if await answers(proc, f"http://127.0.0.1:{port}/health/liveliness", timeout_s):
        return proxy
    await proxy.stop()
    raise PeerUnavailable(
        f"the LiteLLM proxy did not start within {timeout_s:g}s offline (exit {proc.returncode}; see {log.name})"
    )


# -- Portkey ------------------------------------------------------------------------------

PORTKEY_DIR = BENCH_DIR / "portkey"
PORTKEY_SERVER = PORTKEY_DIR / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"


@dataclass
class Portkey:
    """The Portkey AI gateway (node), routing every request to the fake upstream by the
    headers Portkey reads (`x-portkey-provider`, `x-portkey-custom-host`)."""

    proc: trio.Process
    port: int
    version: str
    upstream_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def headers(self, api: str) -> dict[str, str]:
        if api == "anthropic":
            return {
                "x-portkey-provider": "anthropic",
                "x-api-key": "x",
                "x-portkey-custom-host": f"http://127.0.0.1:{self.upstream_port}/v1",
            }
        return {
            "x-portkey-provider": "openai",
            "authorization": "Bearer x",
            "x-portkey-custom-host": f"http://127.0.0.1:{self.upstream_port}/v1",
        }

    def pids(self) -> list[int]:
        return tree(self.proc.pid)

    def rss(self) -> float:
        return sum(rss_mb(p) for p in self.pids())

    async def stop(self) -> None:
        await Proxy.stop(self)  # type: ignore[arg-type]


async def start_portkey(upstream_port: int, log: Path, timeout_s: float = 60.0) -> Portkey:
    node = shutil.which("node")
    if node is None:
        raise PeerUnavailable("node is not installed")
    if not PORTKEY_SERVER.exists():
        raise PeerUnavailable(
            "bench/portkey/node_modules is missing (`make bench` runs "
            "`npm ci --prefix bench/portkey`; it needs the npm registry)"
        )
    version = json.loads((PORTKEY_SERVER.parent.parent / "package.json").read_text())["version"]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    with open(log, "ab") as out:
        proc = await trio.lowlevel.open_process(
            [node, str(PORTKEY_SERVER), f"--port={port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(PORTKEY_DIR),
        )
    portkey = Portkey(proc, port, version, upstream_port)
    if await answers(proc, f"http://127.0.0.1:{port}/", timeout_s, any_status=True):
        return portkey
    await portkey.stop()
    raise PeerUnavailable(
        f"the Portkey gateway did not start within {timeout_s:g}s (exit {proc.returncode}; see {log.name})"
    )
