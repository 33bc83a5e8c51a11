"""The conformance suite, in `make test`: every scenario against every client in the
repository (the Python client and the C client), each with a real daemon and real sockets.

The C client is built here (clients/c/Makefile) against libnng and msgpack-c, which
`make test` installs; if it cannot be built the C tests fail, saying why: they never skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.driver import load_scenarios, run_scenario

REPO = Path(__file__).resolve().parents[2]
C_DIR = REPO / "clients" / "c"
PYTHON_ADAPTER = [sys.executable, str(Path(__file__).resolve().parent / "adapters" / "python_client.py")]

SCENARIOS = load_scenarios()


@pytest.fixture(scope="session")
def c_client() -> list[str]:
    build = subprocess.run(["make", "-C", str(C_DIR)], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(
            "the C client did not build (run `make test`, which installs libnng-dev and "
            f"libmsgpack-dev):\n{build.stdout[-2000:]}\n{build.stderr[-4000:]}"
        )
    return [str(C_DIR / "build" / "tl"), "conform"]


@pytest.fixture(params=["python", "c"])
def client_argv(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "python":
        return PYTHON_ADAPTER
    return request.getfixturevalue("c_client")  # type: ignore[no-any-return]


@pytest.mark.e2e
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["file"].removesuffix(".yaml") for s in SCENARIOS])
async def test_scenario(scenario, client_argv):
    await run_scenario(scenario, client_argv)
