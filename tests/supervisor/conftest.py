from __future__ import annotations

import pytest

from fakes.bare_daemon import Published
from trunkline.config.loader import load_config
from trunkline.supervisor.daemon import Daemon


@pytest.fixture
def daemon(tmp_path) -> Daemon:
    """A real `Daemon` on the default config, without sockets: its event socket is a
    `Published` list, and the tests drive it as its worker links and housekeeping do."""
    d = Daemon(load_config(None), runtime_dir=tmp_path)
    d.events.pub = Published()
    return d
