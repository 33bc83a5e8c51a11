"""Where a host is, judged on its address, however it is spelt."""

from __future__ import annotations

import pytest

from trunkline.config.hosts import is_local, is_loopback, is_this_machine


@pytest.mark.parametrize(
    ("host", "loopback", "this_machine", "local"),
    [
        ("localhost", True, True, True),
        ("LocalHost.", True, True, True),
        ("app.localhost", True, True, True),
        ("127.0.0.1", True, True, True),
        ("127.1.2.3", True, True, True),
        ("::1", True, True, True),
        ("[::1]", True, True, True),
        ("::ffff:127.0.0.1", True, True, True),
        ("[::ffff:127.9.8.7]", True, True, True),
        ("0:0:0:0:0:0:0:1", True, True, True),
        # every interface: a listen there is public, a connection there reaches this machine
        ("0.0.0.0", False, True, True),
        ("::", False, True, True),
        ("10.2.3.4", False, False, True),
        ("::ffff:192.168.1.9", False, False, True),
        ("fe80::1%eth0", False, False, True),
        ("8.8.8.8", False, False, False),
        ("::ffff:8.8.8.8", False, False, False),
        ("128.0.0.1", False, False, False),
        ("localhost.example.com", False, False, False),
        ("127.0.0.1.nip.io", False, False, False),
        ("", False, False, False),
    ],
)
def test_each_spelling_is_judged_by_the_address_it_names(host, loopback, this_machine, local):
    assert is_loopback(host) is loopback
    assert is_this_machine(host) is this_machine
    assert is_local(host) is local
